"""DQN's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import IntrinsicConfig, NetworkConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class DQNConfig(IntrinsicConfig, NetworkConfig):
    """Hyperparameters of DQN and its options."""

    hidden_sizes: list[int] = field(factory=lambda: [128, 128], validator=check.hidden_sizes)
    """Widths of the Q-network's hidden layers."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    lr: float = field(default=2e-3, validator=check.positive)
    """Adam learning rate."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    n_step: int = field(default=3, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the target (1 = classic DQN)."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling head: separate state-value and advantage streams."""
    target_update_interval: int = field(default=500, validator=validators.ge(0))
    """Gradient steps between hard copies into the target network when ``tau`` is None
    (0 and no tau = no target network)."""
    tau: float | None = field(
        default=0.01, validator=check.optional(check.unit_interval_open_low, "hard copies")
    )
    """Soft (Polyak) update: move the target network this fraction towards the online network
    every gradient step. None switches to hard copies every ``target_update_interval`` steps."""
    eps_start: float = field(default=1.0, validator=check.unit_interval)
    """Exploration epsilon at the start of training."""
    eps_end: float = field(default=0.05, validator=check.unit_interval)
    """Exploration epsilon after the decay."""
    eps_decay_steps: int = field(default=5_000, validator=validators.ge(0))
    """Env steps over which epsilon decays linearly from eps_start to eps_end."""
    eps_test: float = field(default=0.0, validator=check.unit_interval)
    """Epsilon used when testing (0 = greedy): the run's tests and an agent's ``act`` /
    ``evaluate`` with ``deterministic=True`` play this share of their actions at random."""
    loss: str = field(default="huber", validator=validators.in_(["huber", "mse"]))
    """TD loss: huber (smooth L1) or mse."""
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
