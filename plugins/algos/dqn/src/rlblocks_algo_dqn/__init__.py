"""DQN for rlblocks (``rlblocks train dqn``)."""
