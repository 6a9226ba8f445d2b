"""Headline experiments: each is `python -m imuon.experiments.<name> [--quick]`."""
