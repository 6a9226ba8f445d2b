"""Headline experiments: each is `python -m ficbo.experiments.<name> [--quick]`."""
