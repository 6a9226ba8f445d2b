"""Headline experiments: each is `python -m eps_completion.experiments.<name> [--quick]`."""
