"""EnvPool vector-env backend for rlblocks (``--backend envpool``)."""
