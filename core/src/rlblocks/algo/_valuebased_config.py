"""Hyperparameters the Q-learning family shares (C51, Rainbow, QR-DQN, IQN, FQF, BDQ).

Each algorithm's config subclasses :class:`ValueBasedConfig` and adds its own fields (atoms,
quantiles, fractions). Imports only attrs and the attrs-only :mod:`rlblocks.contracts`, because
plugin specs import config classes while listing plugins.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo._intrinsic_config import IntrinsicConfig
from rlblocks.algo._network_config import NetworkConfig
from rlblocks.contracts import validators as check

__all__ = ["ValueBasedConfig"]


def _not_above_start(inst: Any, _attribute: object, value: float) -> None:
    if value > inst.eps_start:
        raise ValueError(f"must be <= eps_start={inst.eps_start} (epsilon decays), got {value}")


@define(kw_only=True)
class ValueBasedConfig(IntrinsicConfig, NetworkConfig):
    """Network, target, exploration and optimisation settings of the Q-learning family."""

    hidden_sizes: list[int] = field(factory=lambda: [128, 128], validator=check.hidden_sizes)
    """Widths of the Q-network's hidden layers."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate."""
    adam_eps: float = field(default=1e-8, validator=check.positive)
    """Adam's epsilon (distributional agents often use 0.01 / batch_size)."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    n_step: int = field(default=3, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target (cut at episode ends)."""
    double: bool = True
    """Double Q-learning: the online network picks the bootstrap action, the target network
    values it."""
    dueling: bool = False
    """Dueling head: separate state-value and advantage streams."""
    noisy: bool = False
    """Noisy linear layers (factorised Gaussian) in the Q-network, resampled every gradient
    step: learned exploration (Rainbow pairs it with ``eps_start = eps_end = 0``)."""
    noisy_sigma0: float = field(default=0.5, validator=check.non_negative)
    """Initial noise scale of noisy layers (sigma = sigma0 / sqrt(fan_in))."""
    target_update_interval: int = field(default=500, validator=validators.ge(0))
    """Gradient steps between hard copies into the target network when ``tau`` is None
    (0 and no tau = no target network)."""
    tau: float | None = field(
        default=0.01, validator=check.optional(check.unit_interval_open_low, "hard copies")
    )
    """Soft (Polyak) update rate of the target network per gradient step; None switches to
    hard copies every ``target_update_interval`` steps."""
    eps_start: float = field(default=1.0, validator=check.unit_interval)
    """Exploration epsilon at the start of training."""
    eps_end: float = field(default=0.05, validator=[check.unit_interval, _not_above_start])
    """Exploration epsilon after the decay."""
    eps_decay_steps: int = field(default=5_000, validator=validators.ge(0))
    """Env steps over which epsilon decays linearly from eps_start to eps_end."""
    eps_test: float = field(default=0.0, validator=check.unit_interval)
    """Epsilon used when testing (0 = greedy): the run's tests and an agent's ``act`` /
    ``evaluate`` with ``deterministic=True`` play this share of their actions at random."""
    max_grad_norm: float | None = field(
        default=10.0, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the gradient's global norm to this value (None = no clipping)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through the Nature-DQN CNN or flattened like any Box."""
    encoder: str | None = field(default=None, validator=check.import_path)
    """Import path of your own observation encoder (``"package.module:factory"``), called as
    ``factory(observation_space, action_space, **encoder_kwargs)`` for a module that maps
    observations to features ``[B, D]``; None: the built-in one. A run directory that names one
    imports it again only when trusted (``--trust-imports``)."""
    encoder_kwargs: dict[str, Any] = field(factory=dict)
    """Keyword arguments of the ``encoder`` factory."""
