"""MADDPG and MATD3 for rlblocks (``rlblocks train maddpg``, ``--set algo.td3=true``)."""
