"""Weights & Biases logger plugin for rlblocks."""
