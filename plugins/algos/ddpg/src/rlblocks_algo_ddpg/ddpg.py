"""DDPG: Deep Deterministic Policy Gradient (Lillicrap et al., 2016).

With critic ``Q``, deterministic actor ``mu`` and their Polyak-averaged targets ``Q'``, ``mu'``::

    y    = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) Q'(s_{t+m}, mu'(s_{t+m}))
    L_Q  = mean((Q(s, a) - y)^2)                (weighted by PER weights)
    L_mu = -mean(Q(s, mu(s)))
    then both targets move tau towards their networks.

Exploration adds Gaussian (or Ornstein-Uhlenbeck, as in the paper) noise to ``mu(s)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, TargetNetwork, make_noise
from rlblocks.contracts import Batch
from rlblocks_algo_ddpg.config import DDPGConfig


class DDPGPolicy(OffPolicyPolicy):
    """DDPG for Box actions (see :class:`DDPGConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DDPGConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or DDPGConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"DDPG needs a Box action space, got {action_space}")
        c = self.config = config
        self.actor = self.deterministic_actor()
        self.critic = self.q_ensemble(n=1)
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )
        self.noise = make_noise(c.exploration, c.exploration_sigma)

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """``mu(s)``: actions ``[B, act_dim]`` in [-1, 1] (noise comes from exploration_noise)."""
        with torch.no_grad():
            act = self.actor(self.obs_tensor(batch.obs))
        return Batch(act=act.cpu().numpy(), state=state)

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        noisy = act + self.noise(act.shape, self._rng)
        return np.clip(noisy, -1.0, 1.0) if self.config.clip_exploration else noisy

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        return self.critic_target(obs_next, self.actor_target(obs_next))[0]

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        td = self.critic(obs, act)[0] - batch.returns  # [B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean()
        self.critic_step.step(critic_loss)

        with self.critic_step.frozen():  # the actor's step needs no critic gradients
            actor_loss = -self.critic(obs, self.actor(obs))[0].mean()
            self.actor_step.step(actor_loss)

        self.actor_target.update()
        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs()
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach()}
