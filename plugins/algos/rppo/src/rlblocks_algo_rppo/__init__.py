"""Recurrent PPO for rlblocks (``rlblocks train rppo``)."""
