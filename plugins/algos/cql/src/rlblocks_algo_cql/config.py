"""CQL's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.algo import ActorCriticConfig
from rlblocks.contracts import validators as check


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


def _positive_with_lagrange(inst: Any, _attribute: object, value: float) -> None:
    if inst.with_lagrange and not value > 0:
        raise ValueError(
            f"with_lagrange learns log(alpha_cql), so its starting value must be > 0, got {value!r}"
        )


@define(kw_only=True)
class CQLConfig(ActorCriticConfig):
    """Conservative Q-Learning (Kumar, Zhou, Tucker & Levine, 2020, "Conservative Q-Learning
    for Offline Reinforcement Learning", NeurIPS), the CQL(H) variant on a SAC backbone.

    The defaults are the authors' settings for the D4RL Gym-MuJoCo tasks, as published with
    their code (github.com/aviralkumar2907/CQL: the README's MuJoCo command and the launcher
    ``d4rl/examples/cql_mujoco_new.py``): Adam at 3e-4 for the critics and 1e-4 for the policy,
    batch 256 (the trainer's ``batch_size``), three hidden layers of 256 ReLU units for every
    network, ``gamma`` 0.99, ``tau`` 0.005, two critics, automatic entropy tuning towards
    ``-dim(A)`` from ``alpha`` = 1, ``alpha_cql`` = 5 without the Lagrange multiplier, 10 sampled
    actions per proposal, targets without the entropy bonus and 40,000 gradient steps of
    behaviour cloning before the policy follows the critics.

    The policy's learning rate: the paper's experiments used 3e-5; the authors' README later
    recommends 1e-4 (or 3e-4) for the Gym-MuJoCo tasks, saying the change from the paper comes
    from the revised D4RL datasets, and its MuJoCo command uses 1e-4. The revised datasets are
    the ones available now, so the default is 1e-4.
    """

    # -- the networks (SAC's), with the authors' sizes and learning rates --------------------
    hidden_sizes: list[int] = field(factory=lambda: [256, 256, 256], validator=check.hidden_sizes)
    """Widths of the hidden layers of the actor and of each critic."""
    actor_lr: float = field(default=1e-4, validator=check.positive)
    """Adam learning rate of the policy (see the class docstring for 1e-4 against 3e-5)."""
    log_std_min: float = field(default=-20.0, validator=check.finite)
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the actor's log standard deviation."""
    deterministic_eval: bool = True
    """Test with the mean action (``tanh(mean)``) instead of a sample."""

    # -- SAC's entropy temperature --------------------------------------------------------------
    alpha: float = field(default=1.0, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it (the authors start
    ``log(alpha)`` at 0)."""
    auto_alpha: bool = True
    """Tune the temperature so the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = field(
        default=None, validator=check.optional(check.finite, "minus the action dimension")
    )
    """Entropy target of the automatic tuning; None means ``-act_dim``."""
    alpha_lr: float = field(default=1e-4, validator=check.positive)
    """Adam learning rate of ``log(alpha)`` (the authors use the policy's)."""
    backup_entropy: bool = False
    """Subtract ``alpha * log pi(a'|s')`` in the critics' target, as SAC does. Off by default:
    the paper's critic update (its equation 3) backs up ``Q`` alone, and so does the authors'
    code by default."""

    # -- the conservative penalty ---------------------------------------------------------------
    alpha_cql: float = field(default=5.0, validator=[check.non_negative, _positive_with_lagrange])
    """Weight of the conservative penalty in the critics' loss (5.0 for Gym-MuJoCo; the README
    also reports 10.0 working). 0 turns CQL off: offline SAC. With ``with_lagrange`` it is the
    starting value of the learned weight."""
    num_sampled_actions: int = field(default=10, validator=validators.ge(1))
    """Actions drawn from each of the three proposals (uniform, the policy at ``s``, the policy
    at ``s'``) per state to estimate ``log sum_a exp Q(s, a)``."""
    with_lagrange: bool = False
    """Learn ``alpha_cql`` by dual gradient descent so that the penalty's gap stays near
    ``target_action_gap`` (the paper's CQL-Lagrange, used on AntMaze, Adroit and Kitchen)."""
    target_action_gap: float = field(default=5.0, validator=check.finite)
    """The Lagrange threshold ``tau``: ``alpha_cql`` grows while the gap ``log sum exp Q - Q(s,
    a_data)`` is above it and shrinks while below. On the authors' scale (the estimate sums,
    not averages, its samples; see ``cql.py``), so their published thresholds apply as they
    are: 5.0 (the README's AntMaze command) or 10.0."""
    alpha_cql_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of ``log(alpha_cql)`` with ``with_lagrange`` (the authors use the
    critics')."""
    alpha_cql_max: float = field(default=1e6, validator=check.positive)
    """``alpha_cql`` is kept at or below this with ``with_lagrange`` (the authors clamp at 1e6)."""

    # -- the policy's warm start ---------------------------------------------------------------
    bc_steps: int = field(default=40_000, validator=validators.ge(0))
    """For the first ``bc_steps`` gradient steps the policy learns by behaviour cloning,
    maximising ``log pi(a_data|s)`` plus the entropy bonus, instead of the critics' value; the
    critics learn throughout (40,000 in the authors' MuJoCo launcher, whose comments find 10,000
    about as good). 0: no warm start."""
