"""SAC: off-policy maximum-entropy actor-critic (Haarnoja et al., 2018).

With ``Q_1..Q_n`` the critics, ``Q'`` their Polyak-averaged targets, ``pi`` the tanh-squashed
Gaussian actor and temperature ``alpha``, one gradient step on a batch ``(s, a, y)`` is::

    y      = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V'(s_{t+m})        (process_fn)
    V'(s') = min_i Q'_i(s', a') - alpha * log pi(a'|s'),      a' ~ pi(.|s')           (target_value)
    L_Q    = sum_i mean((Q_i(s, a) - y)^2)                    (weighted by PER weights)
    L_pi   = mean(alpha * log pi(a~|s) - min_i Q_i(s, a~)),    a~ ~ pi(.|s), reparameterised
    L_a    = -mean(log_alpha * (log pi(a~|s) + target_entropy))   (auto_alpha)

then every target critic moves ``tau`` towards its critic.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import EntropyTemperature, OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.contracts import Batch
from rlblocks_algo_sac.config import SACConfig


class SACPolicy(OffPolicyPolicy):
    """SAC for Box actions (see :class:`SACConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SACConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or SACConfig()
        super().__init__(
            observation_space,
            action_space,
            config,
            device,
            action_bound_method=config.action_bound_method,
            **nets,
        )
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(
                f"SAC needs a Box action space, got {action_space}; for Discrete actions use "
                "discrete-sac or dqn"
            )
        c = self.config = config
        self.actor = self.squashed_gaussian_actor((c.log_std_min, c.log_std_max))
        self.critic = self.q_ensemble(n=c.n_critics)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy if c.target_entropy is not None else -self.act_dim,
            tune=c.auto_alpha,
        )
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )
        self.temperature.attach(self, c.alpha_lr)

    @property
    def alpha(self) -> torch.Tensor:
        """The current temperature (a 0-d tensor, no gradient)."""
        return self.temperature.alpha

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sampled actions ``[B, act_dim]`` in [-1, 1]; the mean action when testing with
        ``deterministic_eval``."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            act, _ = self.actor(
                self.obs_tensor(batch.obs), deterministic=greedy, with_log_prob=False
            )
        return Batch(act=act.cpu().numpy(), state=state)

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        act_next, logp_next = self.actor(obs_next)
        q_next = self.critic_target(obs_next, act_next).min(dim=0).values
        return q_next - self.alpha * logp_next

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        # critics: regress every Q_i(s, a) on the soft TD target y
        td = self.critic(obs, act) - batch.returns  # [n, B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)

        # actor: maximise min_i Q_i(s, a~) + alpha * entropy, a~ reparameterised (the loss flows
        # through the critics, whose own gradients are not needed)
        with self.critic_step.frozen():
            act_new, logp = self.actor(obs)
            q_new = self.critic(obs, act_new).min(dim=0).values
            actor_loss = (self.alpha * logp - q_new).mean()
            self.actor_step.step(actor_loss)

        stats: dict[str, Any] = {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q": q_new.detach().mean(),
            "entropy": -logp.detach().mean(),
        }
        if self.temperature.tune:
            # L_a = mean(log_alpha * (-log pi - target_entropy)), -log pi estimating the entropy
            self.temperature.update(-logp.detach())
            stats["alpha"] = self.alpha

        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs().mean(dim=0)
        return stats
