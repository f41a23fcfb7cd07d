"""SAC's hyperparameters, each with its default and meaning. Imports only attrs."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.offpolicy_config import ActorCriticConfig


@define(kw_only=True)
class SACConfig(ActorCriticConfig):
    """Soft Actor-Critic (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and
    Applications"): the shared actor-critic fields plus the entropy temperature."""

    n_critics: int = field(default=2, validator=validators.ge(1))
    """Critics in the ensemble; targets and the actor use their minimum (clipped double Q)."""
    alpha: float = field(default=0.2, validator=validators.gt(0))
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = None
    """Entropy target of the automatic tuning; None means ``-act_dim`` (the paper's heuristic)."""
    alpha_lr: float = field(default=3e-4, validator=validators.gt(0))
    """Adam learning rate of ``log(alpha)``."""
    log_std_min: float = -20.0
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper clamp of the actor's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the mean action (``tanh(mean)``) instead of a sample."""
