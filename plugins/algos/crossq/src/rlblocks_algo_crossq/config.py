"""CrossQ's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ActorCriticConfig
from rlblocks.contracts import validators as check


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


def _below_one(_inst: Any, _attribute: object, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"must be in [0, 1), got {value!r}")


@define(kw_only=True)
class CrossQConfig(ActorCriticConfig):
    """CrossQ (Bhatt et al., ICLR 2024, "CrossQ: Batch Normalization in Deep RL for Greater
    Sample Efficiency and Simplicity"): SAC without target networks, whose critics (and actor)
    use Batch Renormalization and see the current and next state-action pairs in one batch.
    Defaults are the paper's: Adam 1e-3 with beta1 = 0.5, wide 2048-2048 critics, a 256-256
    actor, an actor step every 3 critic steps, normalisation momentum 0.99. ``tau`` is unused
    (there are no target networks)."""

    hidden_sizes: list[int] = field(factory=lambda: [256, 256], validator=check.hidden_sizes)
    """Widths of the actor's hidden layers (and the critics' if ``critic_hidden_sizes`` is None)."""
    critic_hidden_sizes: list[int] | None = field(
        factory=lambda: [2048, 2048], validator=check.optional_hidden_sizes
    )
    """Widths of each critic's hidden layers: wide, as in the paper."""
    actor_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the actor."""
    critic_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the critics."""
    adam_beta1: float = field(default=0.5, validator=_below_one)
    """Adam's first-moment decay for actor, critics and temperature (0.5 in the paper)."""
    adam_beta2: float = field(default=0.999, validator=_below_one)
    """Adam's second-moment decay."""
    policy_delay: int = field(default=3, validator=validators.ge(1))
    """Critic steps per actor (and temperature) step."""
    n_critics: int = field(default=2, validator=validators.ge(1))
    """Critics; the target and the actor use their minimum (clipped double Q)."""
    batch_norm: bool = True
    """Batch Renormalization in the critics (False: plain MLP critics, i.e. SAC without targets,
    which the paper shows diverges)."""
    actor_batch_norm: bool = True
    """Batch Renormalization in the actor's default network too, as in the paper's code."""
    bn_momentum: float = field(default=0.99, validator=_below_one)
    """Fraction of the running statistics kept at each training pass (0.99 in the paper)."""
    bn_warmup: int = field(default=100_000, validator=validators.ge(0))
    """Training passes of plain batch norm before the renormalisation's r and d apply
    (100,000 as in the paper's reference implementation)."""
    r_max: float = field(default=3.0, validator=validators.ge(1.0))
    """Bound of Batch Renormalization's scale correction ``r`` to ``[1 / r_max, r_max]``."""
    d_max: float = field(default=5.0, validator=check.non_negative)
    """Bound of Batch Renormalization's shift correction ``d`` to ``[-d_max, d_max]``."""
    alpha: float = field(default=0.2, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = field(
        default=None, validator=check.optional(check.finite, "minus the action dimension")
    )
    """Entropy target of the automatic tuning; None means ``-act_dim``."""
    alpha_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of ``log(alpha)``."""
    log_std_min: float = field(default=-20.0, validator=check.finite)
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the actor's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the mean action (``tanh(mean)``) instead of a sample."""
