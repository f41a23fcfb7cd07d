"""Soft Actor-Critic for rlblocks (``rlblocks train sac``)."""
