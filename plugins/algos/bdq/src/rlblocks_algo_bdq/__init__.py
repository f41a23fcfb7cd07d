"""BDQ (Branching Dueling Q-Network) for rlblocks (``rlblocks train bdq``)."""
