"""Options of the EnvPool backend. Imports only attrs."""

from __future__ import annotations

from attrs import define, field, validators


@define(kw_only=True)
class EnvPoolConfig:
    """How EnvPool runs the envs."""

    num_threads: int = field(default=0, validator=validators.ge(0))
    """Threads of EnvPool's pool (0: one for classic-control envs, else one per env up to the
    cores this process may use)."""
    thread_affinity_offset: int = field(default=-1, validator=validators.ge(-1))
    """Pin thread ``k`` to core ``offset + k`` (-1: no pinning)."""
