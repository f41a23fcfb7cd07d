"""REINFORCE's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field

from rlblocks.algo import OnPolicyConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class ReinforceConfig(OnPolicyConfig):
    """REINFORCE (Williams, 1992): Monte-Carlo returns, no critic. Of the shared settings the
    critic's (gae_lambda, vf_coef, value_scaling, recompute_advantage) have no effect."""

    lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate."""
    max_grad_norm: float | None = field(
        default=None, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the global gradient norm to this (None: no clipping)."""
    norm_adv: bool = True
    """Standardise the returns over each minibatch: a constant baseline that cuts variance."""
