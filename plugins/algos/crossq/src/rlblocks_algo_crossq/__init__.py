"""CrossQ for rlblocks (``rlblocks train crossq``)."""
