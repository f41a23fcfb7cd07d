"""REINFORCE for rlblocks (``rlblocks train reinforce``)."""
