"""AWAC's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check

_optional_bound = check.optional(check.positive, "no clipping")


def _needed_without_normalisation(inst: Any, _attribute: object, value: float | None) -> None:
    if value is None and not inst.normalize_weights:
        raise ValueError(
            "normalize_weights=false weighs by exp(A / lam), which overflows on large "
            "advantages; give it a bound, e.g. algo.max_weight=20"
        )
    _optional_bound(inst, _attribute, value)


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class AWACConfig(ContinuousActorCriticConfig):
    """Advantage Weighted Actor-Critic (Nair, Gupta, Dalal & Levine, 2020, "AWAC: Accelerating
    Online Reinforcement Learning with Offline Datasets"), trained offline.

    The defaults are the settings of the authors' MuJoCo experiments, as published in rlkit
    (github.com/rail-berkeley/rlkit, the AWAC MuJoCo launcher and ``AWACTrainer``'s defaults):
    ``lam`` (the paper's lambda) 1.0, Adam at 3e-4 for the policy and the critics, an L2
    weight decay of 1e-4 on the policy, twin critics of two hidden layers of 256 ReLU units, a
    policy of four, ``gamma`` 0.99, ``tau`` 0.005, no entropy term, the advantage taken from
    the smaller of the two critics, and the weights ``exp(A / lam)`` normalised over the batch
    (a softmax times the batch size). The policy is a Gaussian whose mean goes through tanh,
    with a state-independent log standard deviation clamped to [-6, 0] (rlkit's). The batch
    of 1,024 is the trainer's ``batch_size`` (the spec's default).
    """

    actor_hidden_sizes: list[int] | None = field(
        factory=lambda: [256, 256, 256, 256], validator=check.optional_hidden_sizes
    )
    """Widths of the policy's hidden layers (the authors' four of 256); None: ``hidden_sizes``."""
    lam: float = field(default=1.0, validator=check.positive)
    """The paper's lambda, the temperature of the weights ``exp(A / lam)``: small follows the
    critics' advantage closely, large approaches behaviour cloning (1.0 in the MuJoCo
    experiments, 0.3 in the dexterous manipulation ones)."""
    normalize_weights: bool = True
    """Normalise the weights over the batch, ``B * softmax_B(A / lam)`` (the authors' code),
    which makes their mean 1 whatever the advantages' scale; False: ``exp(A / lam)`` as
    written in the paper (then ``max_weight`` keeps it finite)."""
    max_weight: float | None = field(default=None, validator=_needed_without_normalisation)
    """Clip each weight at this (after the normalisation); None: no clipping (the authors'
    default), which only ``normalize_weights`` allows."""
    actor_weight_decay: float = field(default=1e-4, validator=check.non_negative)
    """L2 weight decay of the policy's Adam (the authors' 1e-4)."""
    log_std_min: float = field(default=-6.0, validator=check.finite)
    """Lower clamp of the policy's log standard deviation."""
    log_std_max: float = field(default=0.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the policy's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the policy's mean instead of a sample."""
