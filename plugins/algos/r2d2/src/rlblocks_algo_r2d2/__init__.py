"""R2D2 for rlblocks (``rlblocks train r2d2``): a recurrent Q-network learned on replayed
windows from their stored start state, with burn-in, n-step double-Q targets, value rescaling
and priorities over sequences (the ``prioritized-sequence`` buffer sampler).

The classes live in :mod:`rlblocks_algo_r2d2.r2d2`, :mod:`rlblocks_algo_r2d2.network` and
:mod:`rlblocks_algo_r2d2.sampler`; this module stays light so that listing plugins imports
neither torch nor numpy.
"""
