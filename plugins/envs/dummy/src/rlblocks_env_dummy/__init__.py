"""In-process vector-env backend for rlblocks (``backend="dummy"``)."""
