"""TD3: Twin Delayed Deep Deterministic policy gradient (Fujimoto et al., 2018).

With critics ``Q_1, Q_2``, deterministic actor ``mu`` and their Polyak-averaged targets ``Q'``,
``mu'``::

    y      = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V'(s_{t+m})      (process_fn)
    V'(s') = min_i Q'_i(s', a'),  a' = clip(mu'(s') + clip(N(0, policy_noise), +-noise_clip), +-1)
             (the outer clip: target_action_clip)
    L_Q    = sum_i mean((Q_i(s, a) - y)^2)
    every policy_delay critic steps:  L_mu = -mean(Q_1(s, mu(s))),  then the targets move tau

Exploration adds ``N(0, exploration_sigma)`` (or Ornstein-Uhlenbeck) noise to ``mu(s)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, TargetNetwork, make_noise
from rlblocks.contracts import Batch
from rlblocks_algo_td3.config import TD3Config


class TD3Policy(OffPolicyPolicy):
    """TD3 for Box actions (see :class:`TD3Config`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: TD3Config | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or TD3Config()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"TD3 needs a Box action space, got {action_space}")
        c = self.config = config
        self.actor = self.deterministic_actor()
        self.critic = self.q_ensemble(n=2)
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        # the last actor loss, reported on critic-only steps too; written in place, so a
        # captured critic-only step reads the latest one (not part of checkpoints)
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
        """``mu(s)``: actions ``[B, act_dim]`` in [-1, 1] (noise comes from exploration_noise)."""
        with torch.no_grad():
            act = self.actor(self.obs_tensor(batch.obs))
        return Batch(act=act.cpu().numpy(), state=state)

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        noisy = act + self.noise(act.shape, self._rng)
        return np.clip(noisy, -1.0, 1.0) if self.config.clip_exploration else noisy

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        c = self.config
        act_next = self.actor_target(obs_next)
        smoothing = (torch.randn_like(act_next) * c.policy_noise).clamp(-c.noise_clip, c.noise_clip)
        act_next = act_next + smoothing
        if c.target_action_clip:
            act_next = act_next.clamp(-1.0, 1.0)
        return self.critic_target(obs_next, act_next).min(dim=0).values

    def graph_phase(self) -> bool:
        """Whether the next gradient step is also an actor step (see ``learn``)."""
        return (self.gradient_steps + 1) % self.config.policy_delay == 0

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        td = self.critic(obs, act) - batch.returns  # [2, B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)
        self.gradient_steps += 1

        if self.gradient_steps % self.config.policy_delay == 0:
            # the first critic alone drives the actor, as in the paper: evaluated alone, and
            # with the critics' own gradients skipped (the actor's step does not need them)
            with self.critic_step.frozen():
                actor_loss = -self.critic(obs, self.actor(obs), member=0).mean()
                self.actor_step.step(actor_loss)
            self.actor_target.update()
            self.critic_target.update()
            self._last_actor_loss.copy_(actor_loss.detach())

        batch.td_error = td.detach().abs().mean(dim=0)
        return {"loss/critic": critic_loss.detach(), "loss/actor": self._last_actor_loss.clone()}
