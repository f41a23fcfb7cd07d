"""CRR's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class CRRConfig(ContinuousActorCriticConfig):
    """Critic Regularized Regression (Wang, Novikov, Zolna, Springenberg, Reed, Shahriari,
    Siegel, Merel, Gulcehre, Heess & de Freitas, 2020, "Critic Regularized Regression",
    NeurIPS), with a plain (not distributional) critic.

    The filter's settings are the paper's (its equations 3 and 4 and the experiments' choices):
    ``m = 4`` sampled actions for the advantage's baseline, ``beta = 1`` and the exponential
    filter clipped at 20. The optimisation settings are those of the CRR agent in DeepMind's
    Acme, written with the paper (``acme/agents/jax/crr``: ``config.py`` and ``losses.py``): one
    critic, Adam at 3e-4 for the policy and the critic, ``gamma`` 0.99, and target networks of
    the policy and the critic replaced by the online ones every 100 gradient steps. The
    networks are two hidden layers of 256 ReLU units (the shared default) and the policy a
    Gaussian whose mean goes through tanh, with a state-independent log standard deviation.
    The batch is the trainer's ``batch_size`` (256 in the spec's defaults).

    The paper's critic is distributional (a categorical return distribution); this one learns
    the expected return with a squared TD error, as Acme's agent does.
    """

    filter: str = field(default="exp", validator=check.one_of("exp", "binary"))
    """What the policy's regression weighs each dataset action by: ``exp`` (the paper's CRR
    exp: ``min(exp(A / beta), max_weight)``) or ``binary`` (CRR binary: ``1(A > 0)``, only the
    actions the critic finds better than the policy's)."""
    advantage: str = field(default="mean", validator=check.one_of("mean", "max"))
    """The baseline of ``A(s, a) = Q(s, a) - baseline(s)`` over ``num_action_samples`` actions
    of the policy at ``s``: their ``mean`` Q (an estimate of V) or their ``max`` Q (a stricter
    filter). For Discrete actions ``mean`` is the exact expectation over the policy."""
    num_action_samples: int = field(default=4, validator=validators.ge(1))
    """``m``: the policy's actions drawn per state to estimate the baseline."""
    beta: float = field(default=1.0, validator=check.positive)
    """Temperature of the exponential filter, ``exp(A / beta)``."""
    max_weight: float = field(default=20.0, validator=check.positive)
    """The exponential filter is clipped at this (the paper's 20)."""
    target_update_interval: int = field(default=100, validator=validators.ge(0))
    """The target networks (policy and critic) are replaced by the online ones every this many
    gradient steps (Acme's 100); 0 moves them ``tau`` towards the online ones every step
    instead (Polyak averaging)."""
    log_std_min: float = field(default=-5.0, validator=check.finite)
    """Lower clamp of the Gaussian policy's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the Gaussian policy's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the policy's mean (Box) or most likely action (Discrete) instead of a
    sample."""
