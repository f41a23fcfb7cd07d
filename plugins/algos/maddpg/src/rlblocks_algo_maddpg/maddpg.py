"""MADDPG: Multi-Agent Deep Deterministic Policy Gradient (Lowe et al., 2017), and MATD3
(Ackermann et al., 2019) with ``td3``.

Agent ``i`` acts with its own deterministic actor on its own observation, ``a_i = mu_i(o_i)``
(decentralised execution); its critic ``Q_i(x, a_1, ..., a_n)`` reads the global state ``x``
(or all observations) and every agent's action, and is used only in training (centralised
training). From a batch of joint transitions ``(x, o, a, r_i, x', o')``::

    y_i  = sum_{k<m} gamma^k r_{i,t+k} + gamma^m (1 - terminated) Q'_i(x', mu'(o'))
           with mu'(o') = (mu'_1(o'_1), ..., mu'_n(o'_n)), the target actors' joint action
    L_Q  = sum_i mean((Q_i(x, a) - y_i)^2)
    L_mu = -sum_i mean(Q_i(x, a_1, ..., mu_i(o_i), ..., a_n))     (the others' stored actions)
    then every target network moves tau towards its network.

MATD3 (``td3``): two critics per agent, ``y_i`` with the smaller target critic, target actions
``mu'_j(o'_j)`` smoothed with clipped Gaussian noise, and the actors (and the targets) updated
every ``policy_delay`` critic steps, the actor loss reading the first critic.

Exploration adds Gaussian (or Ornstein-Uhlenbeck) noise to every agent's action.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo import OptimizerStep, TargetNetwork, make_noise
from rlblocks.contracts import Batch
from rlblocks_algo_maddpg.agents import AgentNetwork, DeterministicAgentActor, MultiAgentActorCritic
from rlblocks_algo_maddpg.config import MADDPGConfig


class MADDPGPolicy(MultiAgentActorCritic):
    """MADDPG (MATD3 with ``config.td3``) for Box actions of many agents, read from the joint
    view (see :class:`MADDPGConfig` and :mod:`rlblocks_algo_maddpg.agents`)."""

    algo_name = "maddpg"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: MADDPGConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        c = config or MADDPGConfig()
        super().__init__(observation_space, action_space, c, device)
        self.config: MADDPGConfig = c
        sp = self.spaces
        self.actor = DeterministicAgentActor(
            sp, self.hidden_sizes_of("actor"), c.activation, c.share_actor
        )
        self.critic = AgentNetwork(
            sp.n_agents, self.critic_in_dim, 1, self.hidden_sizes_of("critic"), c.activation,
            shared=c.share_critic, members=2 if c.td3 else 1,
        )  # fmt: skip
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        # the last actor loss, reported on MATD3's critic-only steps too
        self.register_buffer("_last_actor_loss", torch.zeros(()), persistent=False)
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
        """Every agent's ``mu_i(o_i)`` in [-1, 1], shaped as the action space (noise comes
        from exploration_noise)."""
        with torch.no_grad():
            rows, _ = self.split_obs(self.obs_tensor(batch.obs))
            act = self.actor(rows)
        return Batch(act=self.env_act(act), state=state)

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        noisy = act + self.noise(act.shape, self._rng)
        return np.clip(noisy, -1.0, 1.0) if self.config.clip_exploration else noisy

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``[B, n]``: each agent's target critic at the target actors' joint action (MATD3:
        smoothed, and the smaller of the two critics)."""
        c = self.config
        rows, x = self.split_obs(obs_next)
        act = self.actor_target(rows)
        if c.td3:
            smoothing = (torch.randn_like(act) * c.policy_noise).clamp(-c.noise_clip, c.noise_clip)
            act = (act + smoothing).clamp(-1.0, 1.0)
        q = self.critic_target(self.critic_input(x, act)).squeeze(-1)  # [members, B, n]
        return q.min(dim=0).values

    @property
    def delay(self) -> int:
        """Critic steps per actor step: ``policy_delay`` for MATD3, 1 for MADDPG."""
        return self.config.policy_delay if self.config.td3 else 1

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        rows, x = self.split_obs(self.obs_tensor(batch.obs))
        act = self.joint_act(batch.act)

        q = self.critic(self.critic_input(x, act)).squeeze(-1)  # [members, B, n]
        critic_loss, td = self.td_loss(q, batch)
        self.critic_step.step(critic_loss)
        self.gradient_steps += 1

        if self.gradient_steps % self.delay == 0:
            # agent i's actor follows its own critic at the joint action with its own action
            # from the actor and the others' as stored; the critics' gradients are not needed
            with self.critic_step.frozen():
                mixed = self.own_action(self.actor(rows), act)
                q_own = self.critic(self.critic_input(x, mixed))[0].squeeze(-1)  # [B, n]
                actor_loss = -q_own.mean(dim=0).sum()
                self.actor_step.step(actor_loss)
            self.actor_target.update()
            self.critic_target.update()
            self._last_actor_loss.copy_(actor_loss.detach())

        self.critic_stats(batch, td)
        return {
            "loss/critic": critic_loss.detach(),
            "loss/actor": self._last_actor_loss.clone(),
            "q": q.detach().mean(),
        }
