"""C51 (categorical distributional DQN) for rlblocks."""
