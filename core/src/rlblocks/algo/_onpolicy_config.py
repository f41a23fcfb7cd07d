"""Hyperparameters every on-policy algorithm shares (REINFORCE, A2C, PPO, NPG, TRPO).

Each algorithm's config class subclasses :class:`OnPolicyConfig` and adds its own fields. This
module imports only attrs (and the attrs-only :mod:`rlblocks.contracts`), because plugin specs
import config classes while listing plugins.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo._intrinsic_config import IntrinsicConfig
from rlblocks.algo._network_config import NetworkConfig
from rlblocks.contracts import validators as check

__all__ = ["OnPolicyConfig"]


@define(kw_only=True)
class OnPolicyConfig(IntrinsicConfig, NetworkConfig):
    """Networks, returns, normalisation and optimisation settings shared by on-policy algorithms."""

    hidden_sizes: list[int] = field(factory=lambda: [64, 64], validator=check.hidden_sizes)
    """Widths of the hidden layers of the actor and of the critic (two separate networks)."""
    actor_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the actor's hidden layers; None: ``hidden_sizes``."""
    critic_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the critic's hidden layers; None: ``hidden_sizes``."""
    activation: str = field(default="tanh", validator=check.activation)
    """Activation between hidden layers (tanh, relu, elu, gelu, silu)."""
    ortho_init: bool = True
    """Orthogonal initialisation, policy output layer scaled by 0.01 (near-uniform first policy)."""
    log_std_init: float = field(default=0.0, validator=check.finite)
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate (of actor and critic; NPG/TRPO use it for the critic only)."""
    lr_decay_steps: int | None = field(
        default=None, validator=check.optional(check.positive, "a constant rate")
    )
    """Anneal the learning rate linearly to zero over this many env steps (None: constant)."""
    gamma: float = field(default=0.99, validator=check.unit_interval)
    """Discount factor."""
    gae_lambda: float = field(default=0.95, validator=check.unit_interval)
    """GAE lambda: 0 is one-step TD advantages, 1 is Monte-Carlo returns minus the value."""
    max_grad_norm: float | None = field(
        default=0.5, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the global gradient norm to this (None: no clipping)."""
    norm_adv: bool = True
    """Standardise advantages per minibatch (zero mean, unit std)."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations: through a Nature-DQN CNN (trained with the loss; features are then
    recomputed in every minibatch) or flattened like any Box."""
    obs_norm: bool = False
    """Normalise observations with a running mean/std updated once per collect; the statistics
    are saved in checkpoints and used by the test envs too."""
    value_scaling: bool = False
    """Train the critic on returns divided by their running std (return scaling); values are
    scaled back before computing advantages."""
    vf_coef: float = field(default=0.5, validator=check.non_negative)
    """Weight of the value loss."""
    ent_coef: float = field(default=0.0, validator=check.non_negative)
    """Weight of the entropy bonus."""
    recompute_advantage: bool = False
    """Recompute values and GAE advantages before every repeat over the data, not only once."""
    action_bound_method: str = field(
        default="clip", validator=validators.in_(["clip", "tanh", "none"])
    )
    """How Box actions are bounded before scaling to [low, high]: clip, tanh or none."""
    action_scaling: bool = True
    """Scale bounded Box actions from [-1, 1] to the action space's [low, high]."""
    deterministic_eval: bool = True
    """Act with the distribution's mode (argmax / mean) when testing."""
    encoder: str | None = field(default=None, validator=check.import_path)
    """Import path of your own observation encoder (``"package.module:factory"``), called as
    ``factory(observation_space, action_space, **encoder_kwargs)`` for a module that maps
    observations to features ``[B, D]``; None: the built-in one. A run directory that names one
    imports it again only when trusted (``--trust-imports``)."""
    encoder_kwargs: dict[str, Any] = field(factory=dict)
    """Keyword arguments of the ``encoder`` factory."""
