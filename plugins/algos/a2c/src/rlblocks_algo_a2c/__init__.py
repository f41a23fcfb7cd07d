"""A2C for rlblocks (``rlblocks train a2c``)."""
