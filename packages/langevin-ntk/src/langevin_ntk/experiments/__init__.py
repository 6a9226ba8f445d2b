"""Headline experiments: each is `python -m langevin_ntk.experiments.<name> [--quick]`."""
