"""QR-DQN's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only config pieces)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class QRDQNConfig(ValueBasedConfig):
    """QR-DQN (Dabney et al., 2018): the value-based fields plus the quantiles and the loss."""

    num_quantiles: int = field(default=200, validator=validators.ge(1))
    """Quantiles of the return distribution per action, at the fixed fractions
    ``(2i + 1) / (2 num_quantiles)`` (200 in the paper's Atari runs; the loss compares every
    quantile with every target sample, so its cost grows with the square)."""
    kappa: float = field(default=1.0, validator=check.non_negative)
    """Threshold of the quantile Huber loss (0: the plain quantile loss)."""
