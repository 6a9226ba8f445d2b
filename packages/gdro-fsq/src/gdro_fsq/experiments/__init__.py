"""Headline experiments: each is `python -m gdro_fsq.experiments.<name> [--quick]`."""
