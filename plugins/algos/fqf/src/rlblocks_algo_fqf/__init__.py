"""FQF (fully parameterized quantile function) for rlblocks."""
