"""BDQ's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only config pieces), because the spec imports this module while listing plugins."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class BDQConfig(ValueBasedConfig):
    """BDQ (Tavakoli et al., 2018): the value-based fields (``hidden_sizes`` is the shared
    trunk) plus the discretisation and the branch heads."""

    bins: int = field(default=25, validator=validators.ge(2))
    """Discrete values per action dimension, evenly spaced from the Box's low to its high
    (both included)."""
    head_hidden_sizes: list[int] = field(factory=lambda: [64], validator=check.hidden_sizes)
    """Hidden widths of the state-value head and of each dimension's advantage head, after the
    shared trunk (an empty list makes each head one linear layer)."""
    dueling: bool = True
    """Dueling branches: ``Q_d = V + A_d - mean A_d`` with one shared state value; off, each
    branch head gives ``Q_d`` directly (the paper's non-dueling branching network)."""
    loss: str = field(default="huber", validator=validators.in_(["huber", "mse"]))
    """Per-branch TD loss: huber (smooth L1) or mse."""
