"""Headline experiments: each is `python -m heavytail_sgd.experiments.<name> [--quick]`."""
