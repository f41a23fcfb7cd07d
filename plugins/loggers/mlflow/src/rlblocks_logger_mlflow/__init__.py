"""MLflow tracking logger plugin for rlblocks."""
