"""rlblocks: deep reinforcement learning for PyTorch, a small core plus plugins composed by name.

This face holds what a user writes first (``rlblocks.train``, ``load``, ``resume``,
``collect_dataset``, the
``make_*`` factories, ``Batch``, ``ReplayBuffer``, ``Collector``, the trainers and the error
types). The building blocks live in the subpackages' faces, lowest first: ``rlblocks.contracts``,
``rlblocks.plugins``, ``rlblocks.replay`` / ``rlblocks.collect`` / ``rlblocks.algo``
(with ``rlblocks.algo.nets``), ``rlblocks.trainers``, ``rlblocks.run``, ``rlblocks.tools`` and
``rlblocks.testing``; together their ``__all__`` lists are the plugin API.

Names are imported on first use, so ``import rlblocks`` (and ``rlblocks list``) never imports
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Batch",
    "CollectStats",
    "Collector",
    "ConfigError",
    "EvalResult",
    "NonFiniteError",
    "OffPolicyTrainer",
    "OfflineTrainer",
    "OnPolicyTrainer",
    "ReplayBuffer",
    "RlblocksError",
    "UnknownComponentError",
    "__version__",
    "collect_dataset",
    "load",
    "make_buffer",
    "make_policy",
    "make_vector_env",
    "resolve_train_config",
    "resume",
    "train",
]

if TYPE_CHECKING:
    from rlblocks.collect import Collector, CollectStats
    from rlblocks.contracts import (
        Batch,
        ConfigError,
        NonFiniteError,
        RlblocksError,
        UnknownComponentError,
    )
    from rlblocks.replay import ReplayBuffer
    from rlblocks.run import (
        Agent,
        EvalResult,
        collect_dataset,
        load,
        make_buffer,
        make_policy,
        make_vector_env,
        resolve_train_config,
        resume,
        train,
    )
    from rlblocks.trainers import OfflineTrainer, OffPolicyTrainer, OnPolicyTrainer

__getattr__, __dir__ = attach(__name__, __file__)
