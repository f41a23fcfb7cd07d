"""TD3 for rlblocks (``rlblocks train td3``)."""
