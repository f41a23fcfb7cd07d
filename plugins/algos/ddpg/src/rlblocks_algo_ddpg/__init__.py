"""DDPG for rlblocks (``rlblocks train ddpg``)."""
