"""PPO's hyperparameters, each with its default and meaning. Imports only attrs
(and core's attrs-only validators)."""

from __future__ import annotations

import math

from attrs import define, field

from rlblocks.algo import OnPolicyConfig
from rlblocks.contracts import validators as check


def _dual_clip(_inst: object, _attribute: object, value: float | None) -> None:
    if value is not None and not 1.0 < value < math.inf:
        raise ValueError(f"must be a finite number > 1 or None (no dual clip), got {value!r}")


@define(kw_only=True)
class PPOConfig(OnPolicyConfig):
    """PPO (Schulman et al., 2017) on top of the shared on-policy settings."""

    clip_ratio: float = field(default=0.2, validator=check.positive)
    """epsilon of the clipped surrogate: the ratio pi/pi_old is clipped to [1-eps, 1+eps]."""
    value_clip: bool = False
    """Clip the new value to within clip_ratio of the value at collection time (PPO2 style)."""
    dual_clip: float | None = field(default=None, validator=_dual_clip)
    """Dual-clip PPO (Ye et al., 2020): bound the loss of negative-advantage samples by
    -dual_clip * A (a constant > 1, e.g. 3); None disables it."""
    target_kl: float | None = field(
        default=None, validator=check.optional(check.positive, "never stop early")
    )
    """Stop the update's remaining epochs once the approximate KL to the collecting policy
    exceeds 1.5 * target_kl (None: never stop early)."""
