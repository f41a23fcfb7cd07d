"""TRPO's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check
from rlblocks_algo_npg.config import NPGConfig


@define(kw_only=True)
class TRPOConfig(NPGConfig):
    """TRPO (Schulman et al., 2015): NPG's direction, the step sized by a KL trust region."""

    max_kl: float = field(default=0.01, validator=check.positive)
    """Trust-region radius delta: mean KL(pi_old || pi_new) allowed per step."""
    backtrack_coeff: float = field(default=0.8, validator=[validators.gt(0), validators.lt(1)])
    """Shrink factor of the line search."""
    max_backtracks: int = field(default=10, validator=validators.ge(1))
    """Line-search trials before the step is rejected (parameters left unchanged)."""
