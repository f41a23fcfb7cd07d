"""FQF's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only config pieces)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class FQFConfig(ValueBasedConfig):
    """FQF (Yang et al., 2019): the value-based fields plus the proposed fractions."""

    num_fractions: int = field(default=32, validator=validators.ge(2))
    """N: fractions the proposal network places per state (quantiles at their N midpoints)."""
    embedding_dim: int = field(default=64, validator=validators.ge(1))
    """Cosine features ``cos(pi i tau)`` embedding each fraction."""
    kappa: float = field(default=1.0, validator=check.non_negative)
    """Threshold of the quantile Huber loss (0: the plain quantile loss)."""
    fraction_lr: float = field(default=2.5e-9, validator=check.positive)
    """Learning rate of the fraction proposal network (the paper's Atari value is 2.5e-9)."""
    fraction_optimizer: str = field(
        default="rmsprop", validator=validators.in_(["adam", "adamw", "rmsprop", "sgd"])
    )
    """Optimizer of the fraction proposal network (the paper uses RMSProp)."""
    entropy_coeff: float = field(default=0.0, validator=check.non_negative)
    """Weight of the proposed fractions' entropy bonus (keeps them from collapsing)."""
