"""Headline experiments: each is `python -m epb.experiments.<name> [--quick]`."""
