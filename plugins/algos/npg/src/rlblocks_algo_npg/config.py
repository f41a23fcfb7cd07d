"""NPG's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import OnPolicyConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class NPGConfig(OnPolicyConfig):
    """Natural policy gradient (Kakade, 2001) with a critic trained by Adam."""

    lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the critic (the actor moves by natural-gradient steps)."""
    actor_step_size: float = field(default=0.5, validator=check.positive)
    """Length multiplier of the actor's natural-gradient step F^-1 g."""
    critic_iters: int = field(default=5, validator=validators.ge(1))
    """Critic gradient steps per minibatch."""
    cg_iters: int = field(default=10, validator=validators.ge(1))
    """Conjugate-gradient iterations when solving F x = g."""
    damping: float = field(default=0.1, validator=check.non_negative)
    """Added to the Fisher matrix's diagonal (F + damping I) for a stable solve."""
