"""MASAC (multi-agent Soft Actor-Critic with centralised critics) for rlblocks."""
