"""Headline experiments: each is `python -m gp_bts.experiments.<name> [--quick]`."""
