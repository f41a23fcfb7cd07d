"""Multi-process vector-env backend for rlblocks (``backend="subproc"``).

Light on purpose: the implementation lives in :mod:`rlblocks_env_subproc.subproc` and is
imported only when a backend is built.
"""
