"""IQL's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check


def _open_unit_interval(_inst: Any, _attribute: object, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value < 1.0:
        raise ValueError(f"must be in (0, 1), got {value!r}")


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class IQLConfig(ContinuousActorCriticConfig):
    """Implicit Q-Learning (Kostrikov, Nair & Levine, 2021, "Offline Reinforcement Learning
    with Implicit Q-Learning", ICLR 2022).

    The defaults are the paper's settings for the D4RL Gym-MuJoCo (locomotion) tasks, as
    published with the authors' code (github.com/ikostrikov/implicit_q_learning,
    ``configs/mujoco_config.py`` and ``learner.py``): Adam at 3e-4 for the policy, the twin Q
    and the value network, two hidden layers of 256 ReLU units, ``gamma`` 0.99, ``tau`` 0.005,
    ``expectile`` 0.7, inverse temperature ``beta`` 3 with the exponentiated advantage clipped
    at 100, and a Gaussian policy whose mean goes through tanh, with a state-independent log
    standard deviation clamped at -5 (and 2). The batch of 256 is the trainer's
    ``batch_size``. The paper's other task families use other pairs: AntMaze 0.9 and 10,
    Kitchen and Adroit 0.7 and 0.5.

    Two things of the authors' script are not here: its cosine decay of the policy's learning
    rate over 1M steps (the rate stays at ``actor_lr``) and its rescaling of the locomotion
    datasets' rewards by ``1000 / (max - min episode return)`` (rewards are read as stored, so
    ``beta`` may need retuning for a dataset whose reward scale is far from D4RL's).
    """

    expectile: float = field(default=0.7, validator=_open_unit_interval)
    """The expectile ``tau`` of the value regression, in (0, 1): ``V(s)`` fits the
    ``tau``-expectile of ``Q(s, a)`` over the dataset's actions. 0.5 is the mean (SARSA-like);
    towards 1 it approaches the best action the dataset took."""
    beta: float = field(default=3.0, validator=check.non_negative)
    """Inverse temperature of the policy extraction: the dataset's actions are weighted by
    ``exp(beta * (Q(s, a) - V(s)))``. 0 weighs every action 1: plain behaviour cloning."""
    max_weight: float = field(default=100.0, validator=check.positive)
    """The exponentiated advantage is clipped at this (the authors' 100), so that a few
    actions with large advantages do not carry the whole batch."""
    value_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of the value network ``V``."""
    deterministic_actor: bool = False
    """For Box actions, a deterministic policy (``tanh`` of a network) fitted by the weighted
    squared error to the dataset's actions, instead of the paper's Gaussian fitted by their
    weighted log-likelihood. Discrete actions always get a categorical policy."""
    log_std_min: float = field(default=-5.0, validator=check.finite)
    """Lower clamp of the Gaussian policy's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the Gaussian policy's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the policy's mean (Box) or most likely action (Discrete) instead of a
    sample, as the authors evaluate."""
