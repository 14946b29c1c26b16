"""Runnable examples (`python -m tfdist_opt.examples.NAME`)."""
