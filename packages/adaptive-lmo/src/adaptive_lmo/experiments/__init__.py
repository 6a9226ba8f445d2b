"""Headline experiments: each is `python -m adaptive_lmo.experiments.<name> [--quick]`."""
