"""Rainbow for rlblocks: C51 composed with prioritized replay, n-step, noisy and dueling nets."""
