"""TD3+BC (Fujimoto & Gu, 2021, "A Minimalist Approach to Offline Reinforcement Learning").

Offline RL from a fixed dataset ``D = {(s, a, r, s')}``, trained by
:class:`rlblocks.trainers.OfflineTrainer`. The paper keeps TD3 (Fujimoto et al., 2018) and
changes two things; this module follows it in that order.

1. States are normalised with the dataset's per-feature mean and standard deviation (its
   Section 5), computed once from every observation of the buffer::

       s <- (s - mean_D(s)) / (std_D(s) + eps)

   Acting, tests and both networks see normalised states; the statistics are part of the
   policy's ``state_dict``, so a checkpoint acts as the trained policy did.

2. The critic update is TD3's, unchanged::

       a'  = clip(pi'(s') + clip(N(0, policy_noise), +-noise_clip), +-1)   (target smoothing)
       y   = r + gamma (1 - terminated) min_i Q'_i(s', a')                 (clipped double Q)
       L_Q = sum_i mean((Q_i(s, a) - y)^2)

3. Every ``policy_delay`` critic steps the actor minimises TD3's loss plus behaviour cloning,
   with the Q term scaled so that its size does not depend on the scale of the returns::

       lambda = alpha / mean_B |Q_1(s, pi(s))|          (a constant: no gradient through it)
       L_pi   = -lambda mean_B Q_1(s, pi(s)) + mean_B (pi(s) - a)^2

   and the target networks move ``tau`` towards the online ones. ``(pi(s) - a)^2`` is averaged
   over the action dimensions too (mean squared error). Actions are in the policy's [-1, 1]
   units, as rlblocks buffers store them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from rlblocks.algo import DatasetObsNorm, OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.contracts import Batch, Buffer
from rlblocks_algo_td3bc.config import TD3BCConfig


class TD3BCPolicy(DatasetObsNorm, OffPolicyPolicy):
    """TD3+BC for Box observations and actions (see :class:`TD3BCConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: TD3BCConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or TD3BCConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"TD3+BC needs a Box action space, got {action_space}")
        c = self.config = config
        self.actor = self.deterministic_actor()
        self.critic = self.q_ensemble(n=2)
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        # 1. the dataset's statistics: s -> (s - obs_mean) * obs_scale, the identity until
        # fitted (at the first update, from the whole dataset)
        self.init_obs_norm(observation_space, c.obs_norm, c.obs_norm_eps, "TD3+BC", auto=False)
        # the last actor statistics, reported on critic-only steps too (not checkpointed)
        self.register_buffer("_last_actor_loss", torch.zeros(()), persistent=False)
        self.register_buffer("_last_lambda", torch.zeros(()), persistent=False)
        self.register_buffer("_last_bc_loss", torch.zeros(()), persistent=False)
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )

    # -- 1. state normalisation: DatasetObsNorm's ---------------------------------------------
    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """One gradient step (:class:`~rlblocks.algo.OffPolicyPolicy`'s), after fitting
        the normalisation statistics to ``buffer`` if none are fitted yet."""
        self.fit_obs_norm_once(buffer)
        return super().update(sample_size, buffer, **kwargs)

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """``pi(s)``: actions ``[B, act_dim]`` in [-1, 1] (deterministic; no exploration)."""
        with torch.no_grad():
            act = self.actor(self.normalize_obs(self.obs_tensor(batch.obs)))
        return Batch(act=act.cpu().numpy(), state=state)

    # -- 2. the critics: TD3's update ---------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``min_i Q'_i(s', a')`` with the smoothed target action ``a'``."""
        c = self.config
        obs_next = self.normalize_obs(obs_next)
        act_next = self.actor_target(obs_next)
        noise = (torch.randn_like(act_next) * c.policy_noise).clamp(-c.noise_clip, c.noise_clip)
        act_next = (act_next + noise).clamp(-1.0, 1.0)
        return self.critic_target(obs_next, act_next).min(dim=0).values

    def graph_phase(self) -> bool:
        """Whether the next gradient step is also an actor step (see ``learn``)."""
        return (self.gradient_steps + 1) % self.config.policy_delay == 0

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.normalize_obs(self.obs_tensor(batch.obs))
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        td = self.critic(obs, act) - batch.returns  # [2, B]; returns: process_fn's target y
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)
        self.gradient_steps += 1

        # -- 3. the actor: the Q term, scaled by lambda, plus behaviour cloning ---------------
        if self.gradient_steps % self.config.policy_delay == 0:
            with self.critic_step.frozen():  # the actor's step needs no critic gradients
                pi = self.actor(obs)
                q = self.critic(obs, pi, member=0)
                lam = self.config.alpha / q.abs().mean().detach()
                bc_loss = F.mse_loss(pi, act)
                actor_loss = -lam * q.mean() + bc_loss
                self.actor_step.step(actor_loss)
            self.actor_target.update()
            self.critic_target.update()
            self._last_actor_loss.copy_(actor_loss.detach())
            self._last_lambda.copy_(lam)
            self._last_bc_loss.copy_(bc_loss.detach())

        batch.td_error = td.detach().abs().mean(dim=0)
        return {
            "loss/critic": critic_loss.detach(),
            "loss/actor": self._last_actor_loss.clone(),
            "loss/bc": self._last_bc_loss.clone(),
            "lambda": self._last_lambda.clone(),
        }
