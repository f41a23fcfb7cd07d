"""A2C's hyperparameters, each with its default and meaning. Imports only attrs."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.onpolicy_config import OnPolicyConfig


@define(kw_only=True)
class A2CConfig(OnPolicyConfig):
    """A2C (Mnih et al., 2016, synchronous variant) on top of the shared on-policy settings."""

    lr: float = field(default=7e-4, validator=validators.gt(0))
    """Learning rate."""
    optimizer: str = field(default="adam", validator=validators.in_(["adam", "rmsprop"]))
    """adam, or rmsprop (alpha 0.99, eps 1e-5) as in the A3C paper."""
    norm_adv: bool = False
    """Standardise advantages per minibatch (A2C's usual default: off)."""
