"""TRPO for rlblocks (``rlblocks train trpo``)."""
