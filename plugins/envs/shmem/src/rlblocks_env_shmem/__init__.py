"""Shared-memory vector-env backend for rlblocks (``backend="shmem"``).

Light on purpose: the implementation lives in :mod:`rlblocks_env_shmem.shmem`.
"""
