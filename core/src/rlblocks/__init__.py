"""rlblocks: deep reinforcement learning for PyTorch, a small core plus plugins composed by name.

Names are imported lazily so that ``import rlblocks`` (and ``rlblocks list``) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Batch": "rlblocks.batch",
    "ReplayBuffer": "rlblocks.buffer",
    "Collector": "rlblocks.collector",
    "CollectStats": "rlblocks.collector",
    "train": "rlblocks.experiment",
    "load": "rlblocks.agent",
    "Agent": "rlblocks.agent",
    "EvalResult": "rlblocks.agent",
    "resume": "rlblocks.experiment",
    "resolve_train_config": "rlblocks.experiment",
    "make_vector_env": "rlblocks.compose",
    "make_buffer": "rlblocks.compose",
    "make_policy": "rlblocks.compose",
    "OffPolicyTrainer": "rlblocks.trainer",
    "OfflineTrainer": "rlblocks.trainer",
    "OnPolicyTrainer": "rlblocks.trainer",
    "RlblocksError": "rlblocks.errors",
    "UnknownComponentError": "rlblocks.errors",
    "ConfigError": "rlblocks.errors",
    "NonFiniteError": "rlblocks.errors",
}

__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:
    from rlblocks.agent import Agent, EvalResult, load
    from rlblocks.batch import Batch
    from rlblocks.buffer import ReplayBuffer
    from rlblocks.collector import Collector, CollectStats
    from rlblocks.compose import make_buffer, make_policy, make_vector_env
    from rlblocks.errors import ConfigError, NonFiniteError, RlblocksError, UnknownComponentError
    from rlblocks.experiment import resolve_train_config, resume, train
    from rlblocks.trainer import OfflineTrainer, OffPolicyTrainer, OnPolicyTrainer


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlblocks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
