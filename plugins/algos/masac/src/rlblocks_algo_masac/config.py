"""MASAC's hyperparameters: the centralised-critic fields MADDPG's plugin defines, plus SAC's
entropy temperature. Imports only attrs (and core's attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.contracts import validators as check
from rlblocks_algo_maddpg.config import MultiAgentActorCriticConfig


def _above_log_std_min(inst: Any, _attribute: object, value: float) -> None:
    if not value > inst.log_std_min:
        raise ValueError(f"must be > log_std_min={inst.log_std_min}, got {value!r}")


@define(kw_only=True)
class MASACConfig(MultiAgentActorCriticConfig):
    """Multi-agent SAC: a tanh-squashed Gaussian actor per agent (decentralised), twin
    centralised soft critics per agent and one entropy temperature for all agents (SAC of
    Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications", with MADDPG's
    centralised critics)."""

    n_critics: int = field(default=2, validator=validators.ge(1))
    """Critics per agent; targets and the actor use their minimum (clipped double Q)."""
    alpha: float = field(default=0.2, validator=check.positive)
    """Entropy temperature; the starting value when ``auto_alpha`` tunes it."""
    auto_alpha: bool = True
    """Tune the temperature so every agent's policy entropy tracks ``target_entropy``."""
    target_entropy: float | None = field(
        default=None, validator=check.optional(check.finite, "minus an agent's action dimension")
    )
    """Entropy target per agent of the automatic tuning; None means ``-act_dim`` of one agent
    (the SAC paper's heuristic)."""
    alpha_lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of ``log(alpha)``."""
    log_std_min: float = field(default=-20.0, validator=check.finite)
    """Lower clamp of the actors' log standard deviation."""
    log_std_max: float = field(default=2.0, validator=[check.finite, _above_log_std_min])
    """Upper clamp of the actors' log standard deviation."""
    deterministic_eval: bool = True
    """Test with every agent's mean action (``tanh(mean)``) instead of a sample."""
