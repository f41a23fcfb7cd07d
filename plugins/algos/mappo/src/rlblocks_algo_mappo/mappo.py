"""MAPPO: PPO whose actor acts on each agent's own observation while the critic, used only in
training, reads the env's global state (centralised training, decentralised execution).

The multi-agent collector stores the env's ``state()`` with every agent transition, as
``global_state`` (when the agent acted) and ``global_state_next`` (when its transition ended),
because the policy sets ``needs_global_state``. Values, bootstraps and the value loss then use
``V(global_state [, own observation features])``; the clipped surrogate is PPO's.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.contracts import Batch, ConfigError
from rlblocks_algo_mappo.config import MAPPOConfig
from rlblocks_algo_ppo.ppo import PPOPolicy


class MAPPOPolicy(PPOPolicy):
    """PPO with a centralised critic on the global state (see :class:`MAPPOConfig`)."""

    #: the multi-agent collector stores ``global_state`` / ``global_state_next`` for us
    needs_global_state = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: MAPPOConfig | None = None,
        device: str | torch.device = "cpu",
        state_space: gym.Space | None = None,
        **nets: Any,
    ) -> None:
        c = config or MAPPOConfig()
        if state_space is None:
            raise ConfigError(
                "mappo's critic learns from the env's global state: train it on a PettingZoo env "
                "with state() (e.g. env.id = 'mpe2.simple_spread_v3:parallel_env'), or use "
                "ippo, whose critic reads each agent's own observation"
            )
        self.state_dim = int(gym.spaces.flatdim(state_space))
        super().__init__(observation_space, action_space, c, device, **nets)
        self.config: MAPPOConfig

    def build_heads(
        self, actor: Any, critic: Any, feature_dim: int, use_critic: bool = True
    ) -> tuple[nn.Module, nn.Module | None]:
        """The critic first, then the actor (the order MAPPO has always drawn its initial
        weights in, so a seed's run stays the same)."""
        critic_net = self.make_critic(critic, self.critic_input_dim(feature_dim))
        return self.make_actor(actor, self.actor_input_dim(feature_dim)), critic_net

    def critic_input_dim(self, feature_dim: int) -> int:
        """The global state, then (with ``critic_obs``) the agent's own features."""
        return self.state_dim + (feature_dim if self.config.critic_obs else 0)

    def rollout_extras(self, batch: Batch) -> dict[str, torch.Tensor]:
        if "global_state" not in batch:
            raise ConfigError(
                "mappo learns from the global state stored with each step; collect with "
                "rlblocks_family_pettingzoo.MultiAgentCollector (a run on a PettingZoo env id does)"
            )
        n = len(batch.act)

        def flat(x: Any) -> torch.Tensor:
            arr = np.asarray(x, dtype=np.float32).reshape(n, -1)
            return torch.as_tensor(arr, device=self.device)

        return {
            "global_state": flat(batch.global_state),
            "global_state_next": flat(batch.global_state_next),
        }

    def critic_value(
        self, data: dict[str, Any], features: torch.Tensor | None = None, next_obs: bool = False
    ) -> torch.Tensor:
        assert self.critic is not None
        state = data["global_state_next" if next_obs else "global_state"]
        if not self.config.critic_obs:
            return self.critic(state)
        if features is None:
            features = self.features(data["obs_next" if next_obs else "obs"])
        return self.critic(torch.cat([state, features], dim=-1))
