"""PPO for rlblocks (``rlblocks train ppo``)."""
