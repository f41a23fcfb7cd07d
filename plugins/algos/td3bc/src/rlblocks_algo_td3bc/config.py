"""TD3+BC's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class TD3BCConfig(ContinuousActorCriticConfig):
    """TD3+BC (Fujimoto & Gu, 2021, "A Minimalist Approach to Offline Reinforcement
    Learning", NeurIPS): TD3 whose actor loss also clones the dataset's actions, on
    observations normalised with the dataset's statistics.

    The defaults are the paper's (its hyperparameter table in the appendix): TD3's own
    settings, unchanged (Adam at 3e-4 for actor and critics, batch 256 — the trainer's
    ``batch_size`` — two 256-unit ReLU layers, ``gamma`` 0.99, ``tau`` 0.005, target policy
    noise 0.2 clipped at 0.5, the actor and the targets updated every second critic step,
    one-step targets), plus ``alpha`` = 2.5 and the normalisation epsilon 1e-3 of TD3+BC.
    The inherited fields keep the shared defaults, which are these numbers already.
    """

    policy_noise: float = field(default=0.2, validator=check.non_negative)
    """Standard deviation of the smoothing noise added to target actions ([-1, 1] units)."""
    noise_clip: float = field(default=0.5, validator=check.non_negative)
    """The smoothing noise is clipped to ``[-noise_clip, noise_clip]``; the smoothed target
    action is clipped to the action bounds, as TD3 does."""
    policy_delay: int = field(default=2, validator=validators.ge(1))
    """Critic steps per actor step; the target networks move on actor steps only."""
    alpha: float = field(default=2.5, validator=check.non_negative)
    """Weight of the Q term against behaviour cloning: ``lambda = alpha / mean|Q|`` over the
    batch. Large: more like TD3; 0: pure behaviour cloning."""
    obs_norm: bool = True
    """Normalise each observation feature with the dataset's mean and standard deviation
    (computed once, from the whole buffer, at the first update), as the paper does."""
    obs_norm_eps: float = field(default=1e-3, validator=check.positive)
    """Added to the standard deviation before dividing: ``(s - mean) / (std + eps)``."""
