"""Headline experiments: each is `python -m diloco_ef.experiments.<name> [--quick]`."""
