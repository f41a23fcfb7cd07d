"""MAPPO (multi-agent PPO with a centralised critic) for rlblocks."""
