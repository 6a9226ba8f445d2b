"""Headline experiments: each is `python -m mssp.experiments.<name> [--quick]`."""
