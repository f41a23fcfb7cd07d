"""NPG for rlblocks (``rlblocks train npg``)."""
