"""CSV / JSON-lines logger plugin for rlblocks."""
