"""Headline experiments: each is `python -m grn_boost.experiments.<name> [--quick]`."""
