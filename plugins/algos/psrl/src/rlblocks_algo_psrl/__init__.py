"""PSRL for rlblocks (``rlblocks train psrl``)."""
