"""REDQ: Randomized Ensembled Double Q-learning (Chen et al., 2021).

SAC with ``N`` critics and a high update-to-data ratio ``G`` (the trainer's ``update_per_step``).
Each gradient step draws a random subset ``M`` of the ``N`` target critics::

    y      = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V'(s_{t+m})      (process_fn)
    V'(s') = min_{i in M} Q'_i(s', a') - alpha * log pi(a'|s'),   a' ~ pi(.|s')
    L_Q    = sum_{i<N} mean((Q_i(s, a) - y)^2)
    every actor_delay steps:
      L_pi = mean(alpha * log pi(a~|s) - mean_{i<N} Q_i(s, a~))      (the ensemble mean)
      L_a  = -mean(log_alpha * (log pi(a~|s) + target_entropy))
    then every target critic moves tau towards its critic.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import EntropyTemperature, OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.contracts import Batch
from rlblocks_algo_redq.config import REDQConfig


class REDQPolicy(OffPolicyPolicy):
    """REDQ for Box actions (see :class:`REDQConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: REDQConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or REDQConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"REDQ needs a Box action space, got {action_space}")
        c = self.config = config
        self.actor = self.squashed_gaussian_actor((c.log_std_min, c.log_std_max))
        self.critic = self.q_ensemble(n=c.ensemble_size)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy if c.target_entropy is not None else -self.act_dim,
            tune=c.auto_alpha,
        )
        # the last actor step's loss, entropy and temperature, reported on critic-only steps
        # too; written in place, so a captured critic-only step reads the latest (not part of
        # checkpoints)
        self.register_buffer("_actor_stats", torch.zeros(3), persistent=False)
        self._actor_stepped = False
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

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sampled actions in [-1, 1]; the mean action when testing with ``deterministic_eval``."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            act, _ = self.actor(
                self.obs_tensor(batch.obs), deterministic=greedy, with_log_prob=False
            )
        return Batch(act=act.cpu().numpy(), state=state)

    def target_value(self, obs_next: Any) -> torch.Tensor:
        act_next, logp_next = self.actor(obs_next)
        q_next = self.critic_target(obs_next, act_next)  # [N, B]
        subset = self._random_subset(q_next.device)
        q_min = q_next[subset].min(dim=0).values
        return q_min - self.alpha * logp_next

    def _random_subset(self, device: torch.device) -> torch.Tensor:
        """``subset_size`` distinct critic indices, uniformly at random. On a GPU they are
        drawn there (uniform keys, sorted): no round trip to the host, and a captured step
        draws afresh at every replay."""
        n, m = self.config.ensemble_size, self.config.subset_size
        if device.type == "cuda":
            return torch.rand(n, device=device).argsort()[:m]
        return torch.randperm(n, device=device)[:m]

    def graph_phase(self) -> bool:
        """Whether the next gradient step is also an actor step (see ``learn``)."""
        return (self.gradient_steps + 1) % self.config.actor_delay == 0

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        td = self.critic(obs, act) - batch.returns  # [N, B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)
        self.gradient_steps += 1

        if self.gradient_steps % self.config.actor_delay == 0:
            with self.critic_step.frozen():  # the actor's step needs no critic gradients
                act_new, logp = self.actor(obs)
                q_new = self.critic(obs, act_new).mean(dim=0)
                actor_loss = (self.alpha * logp - q_new).mean()
                self.actor_step.step(actor_loss)
            # L_a = mean(log_alpha * (-log pi - target_entropy)) (a no-op for a fixed alpha)
            self.temperature.update(-logp.detach())
            self._actor_stats.copy_(
                torch.stack([actor_loss.detach(), -logp.detach().mean(), self.alpha])
            )
            self._actor_stepped = True

        self.critic_target.update()
        batch.td_error = td.detach().abs().mean(dim=0)
        stats: dict[str, Any] = {"loss/critic": critic_loss.detach()}
        if self._actor_stepped:
            actor = self._actor_stats.clone()
            stats.update({"loss/actor": actor[0], "entropy": actor[1]})
            if self.temperature.tune:
                stats["alpha"] = actor[2]
        return stats
