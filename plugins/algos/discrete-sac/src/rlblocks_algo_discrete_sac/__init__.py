"""Discrete SAC for rlblocks (``rlblocks train discrete-sac``)."""
