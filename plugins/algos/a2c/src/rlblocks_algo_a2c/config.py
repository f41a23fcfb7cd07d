"""A2C's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import OnPolicyConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class A2CConfig(OnPolicyConfig):
    """A2C (Mnih et al., 2016, synchronous variant) on top of the shared on-policy settings."""

    lr: float = field(default=7e-4, validator=check.positive)
    """Learning rate."""
    optimizer: str = field(default="adam", validator=validators.in_(["adam", "rmsprop"]))
    """adam, or rmsprop (alpha 0.99, eps 1e-5) as in the A3C paper."""
    norm_adv: bool = False
    """Standardise advantages per minibatch (A2C's usual default: off)."""
    tanh_mean: bool = False
    """Box actions: squash the Gaussian policy's mean into [-1, 1] with tanh (the sampling noise
    is added after it, and ``action_bound_method`` still bounds the sample), as Tianshou's
    ``ActorProb`` does by default (``unbounded=False``). Without it the mean is unbounded and,
    with ``action_bound_method="clip"``, can drift past the bounds where every sample is clipped
    to the same action and the policy gradient carries no signal back."""
