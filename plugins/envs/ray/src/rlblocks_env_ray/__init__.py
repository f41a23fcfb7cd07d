"""Ray vector-env backend for rlblocks (``backend="ray"``).

Light on purpose: listing plugins never imports Ray. The implementation lives in
:mod:`rlblocks_env_ray.ray_env` and is imported only when a backend is built.
"""
