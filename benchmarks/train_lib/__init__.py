"""Library modules of `benchmarks/train.py`, one per concern."""
