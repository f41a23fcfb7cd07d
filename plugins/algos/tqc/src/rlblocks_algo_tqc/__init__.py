"""Truncated Quantile Critics for rlblocks (``rlblocks train tqc``)."""
