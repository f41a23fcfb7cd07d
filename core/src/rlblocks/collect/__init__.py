"""Collecting experience: the synchronous and asynchronous collectors, the helpers vector-env
backends share, and env snapshots (``env_state``) for exact resume.

Builds on ``contracts`` and ``plugins``; what it needs from a policy or a buffer is a protocol
there, so it never imports ``algo`` or ``replay``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "NO_IDS",
    "OUTCOME_NAMES",
    "OUTCOME_RATES",
    "TIANSHOU_KEYS",
    "AsyncCollector",
    "CollectStats",
    "Collector",
    "EpisodeTally",
    "TupleObsAsDict",
    "VectorEnvBase",
    "as_env_ids",
    "can_snapshot",
    "empty_observations",
    "env_state",
    "has_object_leaves",
    "observation_mismatch",
    "observation_value_problem",
    "reset_state_rows",
    "restarted_rows",
    "restore",
    "rows_like",
    "rows_like_state",
    "snapshot",
    "snapshot_or_reason",
    "stack_observations",
    "step_value_problem",
    "to_numpy",
    "to_numpy_tree",
    "vdot",
    "why_not",
]

if TYPE_CHECKING:
    from rlblocks.collect import _env_state as env_state
    from rlblocks.collect._async import AsyncCollector
    from rlblocks.collect._collector import Collector, TupleObsAsDict
    from rlblocks.collect._env_state import (
        can_snapshot,
        restore,
        snapshot,
        snapshot_or_reason,
        why_not,
    )
    from rlblocks.collect._rows import (
        NO_IDS,
        reset_state_rows,
        restarted_rows,
        rows_like,
        rows_like_state,
        to_numpy,
        to_numpy_tree,
        vdot,
    )
    from rlblocks.collect._stats import (
        OUTCOME_NAMES,
        OUTCOME_RATES,
        TIANSHOU_KEYS,
        CollectStats,
        EpisodeTally,
    )
    from rlblocks.collect._vector_env import (
        VectorEnvBase,
        as_env_ids,
        empty_observations,
        has_object_leaves,
        observation_mismatch,
        observation_value_problem,
        stack_observations,
        step_value_problem,
    )

__getattr__, __dir__ = attach(__name__, __file__)
