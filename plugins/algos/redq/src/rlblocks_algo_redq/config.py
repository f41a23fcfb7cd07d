"""REDQ's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check


def _within_ensemble(inst: Any, _attribute: object, value: int) -> None:
    if value > inst.ensemble_size:
        raise ValueError(
            f"{value} exceeds ensemble_size={inst.ensemble_size}; the target's subset is drawn "
            "from the ensemble"
        )


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class REDQConfig(ContinuousActorCriticConfig):
    """Randomized Ensembled Double Q-learning (Chen et al., 2021): SAC's actor and temperature
    with a large critic ensemble, a random subset of which forms each target. The
    update-to-data ratio is the trainer's ``update_per_step`` (the paper's G = 20)."""

    ensemble_size: int = field(default=10, validator=validators.ge(1))
    """Critics in the ensemble (the paper's N)."""
    subset_size: int = field(default=2, validator=[validators.ge(1), _within_ensemble])
    """Target critics drawn at random for each target's minimum (the paper's M)."""
    actor_delay: int = field(default=20, validator=validators.ge(1))
    """Critic steps per actor and temperature step (the paper updates the actor once per G)."""
    alpha: float = field(default=0.2, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = field(
        default=None, validator=check.optional(check.finite, "minus the action dimension")
    )
    """Entropy target of the automatic tuning; None means ``-act_dim``."""
    alpha_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of ``log(alpha)``."""
    log_std_min: float = field(default=-20.0, validator=check.finite)
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the actor's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the mean action instead of a sample."""
