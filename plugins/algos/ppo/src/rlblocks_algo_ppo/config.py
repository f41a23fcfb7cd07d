"""PPO's hyperparameters, each with its default and meaning. Imports only attrs."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.onpolicy_config import OnPolicyConfig


def _optional_positive(_inst: object, _attribute: object, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"must be > 0 or None, got {value!r}")


def _dual_clip(_inst: object, _attribute: object, value: float | None) -> None:
    if value is not None and not value > 1.0:
        raise ValueError(f"dual_clip must be > 1 or None, got {value!r}")


@define(kw_only=True)
class PPOConfig(OnPolicyConfig):
    """PPO (Schulman et al., 2017) on top of the shared on-policy settings."""

    clip_ratio: float = field(default=0.2, validator=validators.gt(0))
    """epsilon of the clipped surrogate: the ratio pi/pi_old is clipped to [1-eps, 1+eps]."""
    value_clip: bool = False
    """Clip the new value to within clip_ratio of the value at collection time (PPO2 style)."""
    dual_clip: float | None = field(default=None, validator=_dual_clip)
    """Dual-clip PPO (Ye et al., 2020): bound the loss of negative-advantage samples by
    -dual_clip * A (a constant > 1, e.g. 3); None disables it."""
    target_kl: float | None = field(default=None, validator=_optional_positive)
    """Stop the update's remaining epochs once the approximate KL to the collecting policy
    exceeds 1.5 * target_kl (None: never stop early)."""
