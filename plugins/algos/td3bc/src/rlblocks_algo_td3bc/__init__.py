"""TD3+BC for rlblocks: offline RL from a fixed dataset (``training="offline"``)."""
