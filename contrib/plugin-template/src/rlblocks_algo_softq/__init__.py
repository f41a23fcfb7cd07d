"""Soft Q-learning for rlblocks — the worked example of a third-party algorithm plugin."""
