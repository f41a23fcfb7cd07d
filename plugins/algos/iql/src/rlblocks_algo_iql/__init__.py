"""IQL for rlblocks: offline RL from a fixed dataset (``training="offline"``)."""
