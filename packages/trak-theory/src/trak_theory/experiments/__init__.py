"""Headline experiments: each is `python -m trak_theory.experiments.<name> [--quick]`."""
