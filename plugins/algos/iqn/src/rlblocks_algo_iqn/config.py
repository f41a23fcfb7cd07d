"""IQN's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only config pieces)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ValueBasedConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class IQNConfig(ValueBasedConfig):
    """IQN (Dabney et al., 2018b): the value-based fields plus the sampled fractions."""

    num_tau_samples: int = field(default=64, validator=validators.ge(1))
    """N: fractions sampled per transition for the online quantiles in the loss (64 in the
    paper's Atari runs; the loss compares all N with all N' target samples)."""
    num_tau_prime_samples: int = field(default=64, validator=validators.ge(1))
    """N': fractions sampled per transition for the target quantiles in the loss (64 in the
    paper)."""
    num_quantile_samples: int = field(default=32, validator=validators.ge(1))
    """K: fractions whose quantiles average to the expected Q that picks actions (sampled while
    training, evenly spaced midpoints while testing; 32 in the paper)."""
    embedding_dim: int = field(default=64, validator=validators.ge(1))
    """Cosine features ``cos(pi i tau)`` embedding each fraction."""
    kappa: float = field(default=1.0, validator=check.non_negative)
    """Threshold of the quantile Huber loss (0: the plain quantile loss)."""
