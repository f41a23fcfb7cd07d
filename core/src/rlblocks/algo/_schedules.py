"""Learning-rate schedules as functions of the env step, which the trainer hands to the policy
(``set_env_step``) before every collect."""

from __future__ import annotations

__all__ = ["linear_decay"]


def linear_decay(
    initial: float, env_step: int, decay_steps: int | None, final: float = 0.0
) -> float:
    """``initial`` decayed linearly to ``final`` over ``decay_steps`` env steps (constant when
    ``decay_steps`` is None or 0). The PPO paper's MuJoCo and Atari runs anneal to zero this way."""
    if not decay_steps:
        return initial
    frac = min(1.0, max(0.0, env_step / decay_steps))
    return initial + frac * (final - initial)
