"""IQN (implicit quantile networks) for rlblocks."""
