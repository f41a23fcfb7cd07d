"""REDQ for rlblocks (``rlblocks train redq``)."""
