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
import numpy as np
import torch
import torch.nn.functional as F

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, RunningMeanStd, TargetNetwork
from rlblocks.algo.nets import is_image_space
from rlblocks.contracts import Batch, Buffer, ConfigError
from rlblocks_algo_td3bc.config import TD3BCConfig

#: observations read per chunk while computing the dataset's statistics
_FIT_CHUNK = 65_536


class TD3BCPolicy(OffPolicyPolicy):
    """TD3+BC for Box observations and actions (see :class:`TD3BCConfig`)."""

    obs_mean: torch.Tensor
    obs_scale: torch.Tensor
    obs_count: torch.Tensor

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
        if c.obs_norm and (
            not isinstance(observation_space, gym.spaces.Box) or is_image_space(observation_space)
        ):
            raise ConfigError(
                f"algo.obs_norm normalises each feature of a vector observation, and "
                f"{observation_space} is not one; set algo.obs_norm=false"
            )
        self.actor = self.deterministic_actor()
        self.critic = self.q_ensemble(n=2)
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        # 1. the dataset's statistics: s -> (s - obs_mean) * obs_scale, the identity until
        # fitted; obs_count is how many observations they came from (0: not fitted yet)
        shape = tuple(observation_space.shape or ())
        self.register_buffer("obs_mean", torch.zeros(shape))
        self.register_buffer("obs_scale", torch.ones(shape))
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self._obs_fitted = False  # host copy of obs_count > 0, read once per load
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

    # -- 1. state normalisation -----------------------------------------------------------------
    @torch.no_grad()
    def fit_obs_norm(self, buffer: Buffer) -> None:
        """Set the normalisation statistics from every observation stored in ``buffer`` (the
        dataset). :meth:`update` calls it at the first update when ``obs_norm`` is on and no
        statistics were fitted or loaded; call it yourself to fit them earlier."""
        index = buffer.sample_indices(0)
        if len(index) == 0:
            raise ConfigError(
                "TD3+BC normalises observations with the dataset's statistics, but the buffer "
                "is empty; fill it first (or set algo.obs_norm=false)"
            )
        stats = RunningMeanStd(self.obs_mean.shape, epsilon=0.0, clip=None)
        for start in range(0, len(index), _FIT_CHUNK):
            stats.update(np.asarray(buffer.get(index[start : start + _FIT_CHUNK], "obs")))
        eps = self.config.obs_norm_eps
        self.obs_mean.copy_(stats.mean.float())
        self.obs_scale.copy_(1.0 / (stats.var.sqrt() + eps).float())
        self.obs_count.copy_(stats.count)
        self._obs_fitted = True

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """``(obs - mean) / (std + eps)`` with the dataset's statistics (``obs`` unchanged
        when ``obs_norm`` is off)."""
        if not self.config.obs_norm:
            return obs
        return (obs - self.obs_mean) * self.obs_scale

    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """One gradient step (:class:`~rlblocks.algo.OffPolicyPolicy`'s), after fitting
        the normalisation statistics to ``buffer`` if none are fitted yet."""
        if self.config.obs_norm and not self._obs_fitted and buffer is not None and len(buffer):
            if float(self.obs_count) > 0:  # loaded from a checkpoint
                self._obs_fitted = True
            else:
                self.fit_obs_norm(buffer)
        return super().update(sample_size, buffer, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict``; the next update reads the loaded ``obs_count`` to
        tell whether the statistics came with the weights (else it fits them)."""
        self._obs_fitted = False
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

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
