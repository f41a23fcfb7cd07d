"""TensorBoard logger plugin for rlblocks."""
