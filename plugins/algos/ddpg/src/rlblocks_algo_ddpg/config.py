"""DDPG's hyperparameters, each with its default and meaning. Imports only attrs."""

from __future__ import annotations

from attrs import define

from rlblocks.algo import DeterministicActorCriticConfig


@define(kw_only=True)
class DDPGConfig(DeterministicActorCriticConfig):
    """Deep Deterministic Policy Gradient (Lillicrap et al., 2016): one critic, a deterministic
    actor, Polyak-averaged targets for both, and exploration noise; every field is shared with
    TD3 (see :class:`~rlblocks.algo.DeterministicActorCriticConfig`)."""
