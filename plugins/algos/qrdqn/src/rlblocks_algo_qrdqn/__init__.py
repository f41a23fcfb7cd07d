"""QR-DQN (quantile regression distributional DQN) for rlblocks."""
