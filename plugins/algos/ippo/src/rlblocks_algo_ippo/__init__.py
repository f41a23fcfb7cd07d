"""Independent PPO (IPPO) for rlblocks' multi-agent runs."""
