"""TQC's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ActorCriticConfig
from rlblocks.contracts import validators as check


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


def _keeps_some(inst: Any, _attribute: object, value: int) -> None:
    if not value < inst.n_quantiles:
        raise ValueError(
            f"must be < n_quantiles={inst.n_quantiles} (dropping every atom leaves no target), "
            f"got {value!r}"
        )


@define(kw_only=True)
class TQCConfig(ActorCriticConfig):
    """Truncated Quantile Critics (Kuznetsov et al., 2020, "Controlling Overestimation Bias with
    Truncated Mixture of Continuous Distributional Quantile Critics"): the shared actor-critic
    fields, the SAC temperature, and the quantile critics with their truncation."""

    n_critics: int = field(default=5, validator=validators.ge(1))
    """Critics ``N``, each predicting ``n_quantiles`` atoms of the return distribution."""
    n_quantiles: int = field(default=25, validator=validators.ge(1))
    """Atoms ``M`` per critic, at the fixed fractions ``(2i + 1) / 2M``."""
    drop_per_critic: int = field(default=2, validator=[validators.ge(0), _keeps_some])
    """Atoms ``d`` dropped per critic from the top of the pooled target: the target keeps the
    smallest ``N * (M - d)`` of all ``N * M`` target atoms (the paper's overestimation control;
    its default 2, its Hopper 5)."""
    kappa: float = field(default=1.0, validator=check.non_negative)
    """Huber threshold of the quantile loss (0: the plain quantile loss)."""
    alpha: float = field(default=0.2, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks ``target_entropy`` (as the paper)."""
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
    """Test with the mean action (``tanh(mean)``) instead of a sample."""
