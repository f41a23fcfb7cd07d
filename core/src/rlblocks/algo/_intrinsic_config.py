"""The intrinsic-reward settings every online algorithm's config shares (``algo.intrinsic``).

A mixin of attrs fields, inherited by the on-policy, value-based and actor-critic config bases
and by DQN's config, so ``--set algo.intrinsic=icm`` works for any of them. Imports only attrs
(and the attrs-only :mod:`rlblocks.contracts`), because plugin specs import config classes while
listing plugins.
"""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check

__all__ = ["IntrinsicConfig"]

_kind = check.one_of("icm")


def _optional_kind(inst: object, attribute: object, value: object) -> None:
    if value is not None:
        _kind(inst, attribute, value)


@define(kw_only=True)
class IntrinsicConfig:
    """Curiosity: an intrinsic reward added to the env's reward of every batch learned from."""

    intrinsic: str | None = field(default=None, validator=_optional_kind)
    """Intrinsic reward: ``"icm"`` (the intrinsic curiosity module of Pathak et al., 2017: the
    error of a learned forward model in a learned feature space) or None (the env's reward
    only). On-policy algorithms add it before returns and GAE are computed, replay-based ones
    to each sampled batch (and to every reward an n-step target reads)."""
    icm_reward_scale: float = field(default=0.01, validator=check.non_negative)
    """eta: the intrinsic reward is ``eta / 2 * ||f(phi(s), a) - phi(s')||^2``."""
    icm_beta: float = field(default=0.2, validator=check.unit_interval)
    """Weight of the forward-model loss; the inverse-model loss gets ``1 - beta``."""
    icm_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the curiosity module (its own optimizer, one step per update)."""
    icm_feature_dim: int = field(default=64, validator=validators.ge(1))
    """Width of the learned features phi(s)."""
    icm_hidden_sizes: list[int] = field(factory=lambda: [128], validator=check.hidden_sizes)
    """Hidden widths of the feature encoder and of the inverse and forward models."""
    icm_extrinsic: bool = True
    """Keep the env's reward (False: learn from curiosity alone)."""
