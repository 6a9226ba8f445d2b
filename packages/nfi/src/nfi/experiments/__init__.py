"""Headline experiments: each is `python -m nfi.experiments.<name> [--quick]`."""
