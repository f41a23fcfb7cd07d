"""TD3's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import DeterministicActorCriticConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class TD3Config(DeterministicActorCriticConfig):
    """Twin Delayed DDPG (Fujimoto et al., 2018): the deterministic actor-critic fields plus
    target policy smoothing and delayed actor updates."""

    policy_noise: float = field(default=0.2, validator=check.non_negative)
    """Standard deviation of the smoothing noise added to target actions ([-1, 1] units)."""
    noise_clip: float = field(default=0.5, validator=check.non_negative)
    """The smoothing noise is clipped to ``[-noise_clip, noise_clip]``."""
    target_action_clip: bool = True
    """Clip the smoothed target action to the action bounds [-1, 1], as the TD3 paper's reference
    code does; False leaves it as the smoothing made it, as Tianshou 2.0 does (the buffer keeps
    the actions the policy chose, which exploration noise can push past the bounds the env
    clips them to, so the critic is trained on such actions too)."""
    policy_delay: int = field(default=2, validator=validators.ge(1))
    """Critic steps per actor step; the target networks move on actor steps only."""
