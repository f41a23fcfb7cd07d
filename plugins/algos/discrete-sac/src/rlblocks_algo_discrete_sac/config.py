"""Discrete SAC's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ActorCriticConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class DiscreteSACConfig(ActorCriticConfig):
    """Soft Actor-Critic for discrete actions (Christodoulou, 2019): a categorical actor and
    critics that output one value per action, so expectations over actions are exact sums."""

    n_critics: int = field(default=2, validator=validators.ge(1))
    """Critics in the ensemble; targets and the actor use their minimum."""
    alpha: float = field(default=0.05, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = False
    """Tune the temperature towards ``target_entropy_ratio * log(num_actions)``."""
    target_entropy_ratio: float = field(default=0.5, validator=check.unit_interval_open_low)
    """Entropy target of the automatic tuning as a fraction of the uniform policy's entropy."""
    alpha_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of ``log(alpha)``."""
    deterministic_eval: bool = True
    """Test with the most likely action instead of a sample."""
