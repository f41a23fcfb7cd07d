"""Recurrent PPO's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from typing import Any

from attrs import define, field

from rlblocks.algo import OnPolicyConfig
from rlblocks.contracts import validators as check


def _int_at_least_1(_inst: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"must be an int >= 1, got {value!r}")


@define(kw_only=True)
class RPPOConfig(OnPolicyConfig):
    """PPO with a recurrent memory on top of the shared on-policy settings.

    The actor and the critic each have their own recurrent layers and a head after them."""

    hidden_sizes: list[int] = field(factory=lambda: [64, 64], validator=check.hidden_sizes)
    """Widths of the hidden layers of the actor's and of the critic's heads, which read the
    output of their recurrent layers."""
    cell: str = field(default="lstm", validator=check.one_of("lstm", "gru"))
    """Recurrent cell of the actor and of the critic: lstm or gru."""
    rnn_hidden_size: int = field(default=64, validator=_int_at_least_1)
    """Width of the recurrent state (per layer)."""
    rnn_layers: int = field(default=1, validator=_int_at_least_1)
    """Stacked recurrent layers."""
    seq_len: int = field(default=16, validator=_int_at_least_1)
    """Length of the windows each env's rollout is cut into for learning (the truncated
    backpropagation-through-time horizon); each window starts from the state stored with its
    first step. trainer.batch_size counts env steps: a minibatch is batch_size // seq_len
    windows (at least one)."""
    prev_action_reward: bool = False
    """Feed each step's previous action (one-hot for discrete actions) and previous reward to
    both memories beside the observation (RLlib's lstm_use_prev_action / lstm_use_prev_reward).
    They reach the policy as trajectory views (``prev_act``, ``prev_rew``), which the collector
    builds while acting and stores with the step; zeros at an episode's first step."""
    clip_ratio: float = field(default=0.2, validator=check.positive)
    """epsilon of the clipped surrogate: the ratio pi/pi_old is clipped to [1-eps, 1+eps]."""
    value_clip: bool = False
    """Clip the new value to within clip_ratio of the value computed before the update."""
    target_kl: float | None = field(
        default=None, validator=check.optional(check.positive, "never stop early")
    )
    """Stop the update's remaining epochs once the approximate KL to the collecting policy
    exceeds 1.5 * target_kl (None: never stop early)."""
