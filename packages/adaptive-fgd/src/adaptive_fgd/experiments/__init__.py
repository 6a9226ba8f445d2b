"""Headline experiments: each is `python -m adaptive_fgd.experiments.<name> [--quick]`."""
