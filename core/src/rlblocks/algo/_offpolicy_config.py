"""Hyperparameters the off-policy actor-critic algorithms share (DDPG, TD3, SAC, REDQ).

Each algorithm's config subclasses :class:`ActorCriticConfig` (through
:class:`ContinuousActorCriticConfig` for Box actions) and adds its own fields. This module
imports only attrs (and the attrs-only :mod:`rlblocks.contracts`), because plugin specs import
config classes while listing plugins.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo._intrinsic_config import IntrinsicConfig
from rlblocks.algo._network_config import NetworkConfig
from rlblocks.contracts import validators as check

__all__ = ["ActorCriticConfig", "ContinuousActorCriticConfig", "DeterministicActorCriticConfig"]

_bound_method = check.one_of("clip", "none")


def _no_second_tanh(inst: Any, attribute: Any, value: Any) -> None:
    if value == "tanh":
        raise ValueError(
            "'tanh' would squash the actor's tanh output a second time, so actions could never "
            "reach the env's bounds; use 'clip' (the default) or 'none'"
        )
    _bound_method(inst, attribute, value)


@define(kw_only=True)
class ActorCriticConfig(IntrinsicConfig, NetworkConfig):
    """Networks, targets and optimisation settings of the off-policy actor-critic algorithms."""

    hidden_sizes: list[int] = field(factory=lambda: [256, 256], validator=check.hidden_sizes)
    """Widths of the hidden layers of the actor and of each critic."""
    actor_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the actor's hidden layers; None: ``hidden_sizes``."""
    critic_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the critic's hidden layers; None: ``hidden_sizes``."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    actor_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of the actor."""
    critic_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of the critics."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    tau: float = field(default=0.005, validator=check.unit_interval_open_low)
    """Polyak rate of the target networks: each gradient step moves them this fraction towards
    the online networks."""
    n_step: int = field(default=1, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target (cut at episode ends)."""
    max_grad_norm: float | None = field(
        default=None, validator=check.optional(check.positive, "no clipping")
    )
    """Clip each network's global gradient norm to this (None: no clipping)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through a CNN (one per network) or flattened like any Box."""
    action_bound_method: str = field(default="clip", validator=_no_second_tanh)
    """How ``map_action`` bounds actions before scaling them to the env's range: ``clip`` or
    ``none``. The actors end in tanh already, so ``clip`` only catches exploration noise that
    leaves [-1, 1] (a second tanh would keep actions off the bounds, so it is refused)."""
    encoder: str | None = field(default=None, validator=check.import_path)
    """Import path of your own observation encoder (``"package.module:factory"``), called as
    ``factory(observation_space, action_space, **encoder_kwargs)`` for a module that maps
    observations to features ``[B, D]``; None: the built-in one. A run directory that names one
    imports it again only when trusted (``--trust-imports``)."""
    encoder_kwargs: dict[str, Any] = field(factory=dict)
    """Keyword arguments of the ``encoder`` factory."""


@define(kw_only=True)
class ContinuousActorCriticConfig(ActorCriticConfig):
    """:class:`ActorCriticConfig` for Box actions (DDPG, TD3, SAC, REDQ), whose gradient step a
    GPU can capture."""

    cuda_graph: bool = True
    """On a CUDA device, capture the gradient step as a CUDA graph and replay it: the same
    arithmetic in one launch (``rlblocks.algo``; a delayed actor step, as TD3's and
    REDQ's, is a graph of its own; ``contrib/benchmarks/update_rate.py`` measures it). It needs
    no learning-rate schedule (n-step targets are fine); with one, on a CPU, or with False, the
    eager step runs (on a GPU with a warning that says why)."""


@define(kw_only=True)
class DeterministicActorCriticConfig(ContinuousActorCriticConfig):
    """:class:`ActorCriticConfig` plus the exploration of a deterministic actor (DDPG, TD3)."""

    exploration: str = field(default="gaussian", validator=validators.in_(["gaussian", "ou"]))
    """Exploration noise added to the actor's actions while collecting: ``gaussian``
    (independent per step) or ``ou`` (Ornstein-Uhlenbeck, correlated in time)."""
    exploration_sigma: float = field(default=0.1, validator=check.non_negative)
    """Standard deviation of the exploration noise, in the actor's [-1, 1] units."""
    clip_exploration: bool = False
    """Clip the noisy action to [-1, 1] where the noise is added, so the buffer keeps the action
    the env ran (the TD3 paper's code and Stable-Baselines3 do this); False keeps the unclipped
    noisy action in the buffer and bounds only the env's copy (``map_action``), as Tianshou
    does, so the critics also learn from actions past the bounds."""
