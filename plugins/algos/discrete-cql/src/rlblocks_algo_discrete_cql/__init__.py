"""Discrete CQL for rlblocks (registry name ``discrete-cql``)."""
