"""Headline experiments: each is `python -m segre.experiments.<name> [--quick]`."""
