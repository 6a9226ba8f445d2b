"""Headline experiments: each is `python -m learning_theory.experiments.<name> [--quick]`."""
