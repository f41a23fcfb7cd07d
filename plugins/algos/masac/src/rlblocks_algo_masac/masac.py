"""MASAC: Soft Actor-Critic for many agents with centralised critics (SAC, Haarnoja et al.,
2018, with the centralised critics of MADDPG, Lowe et al., 2017).

Agent ``i`` samples its action from its own tanh-squashed Gaussian on its own observation,
``a_i ~ pi_i(.|o_i)`` (decentralised execution); its soft critics ``Q_i^1, Q_i^2`` read the
global state ``x`` (or all observations) and every agent's action (centralised training).
With one temperature ``alpha`` for all agents, from a batch of joint transitions::

    y_i   = sum_{k<m} gamma^k r_{i,t+k} + gamma^m (1 - terminated) V'_i(x', o')
    V'_i  = min_k Q'^k_i(x', a'_1..a'_n) - alpha * log pi_i(a'_i|o'_i),    a'_j ~ pi_j(.|o'_j)
    L_Q   = sum_{i,k} mean((Q^k_i(x, a) - y_i)^2)
    L_pi  = sum_i mean(alpha * log pi_i(a~_i|o_i) - min_k Q^k_i(x, a_1..a~_i..a_n)),
            a~_i ~ pi_i(.|o_i) reparameterised, the others' actions as stored
    L_a   = -mean(log_alpha * (log pi_i(a~_i|o_i) + target_entropy))     (auto_alpha)

then every target critic moves ``tau`` towards its critic.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import EntropyTemperature, OptimizerStep, TargetNetwork
from rlblocks.contracts import Batch
from rlblocks_algo_maddpg.agents import AgentNetwork, GaussianAgentActor, MultiAgentActorCritic
from rlblocks_algo_masac.config import MASACConfig


class MASACPolicy(MultiAgentActorCritic):
    """MASAC for Box actions of many agents, read from the joint view (see
    :class:`MASACConfig` and :mod:`rlblocks_algo_maddpg.agents`)."""

    algo_name = "masac"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: MASACConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        c = config or MASACConfig()
        super().__init__(observation_space, action_space, c, device)
        self.config: MASACConfig = c
        sp = self.spaces
        self.actor = GaussianAgentActor(
            sp, self.hidden_sizes_of("actor"), c.activation, c.share_actor,
            (c.log_std_min, c.log_std_max),
        )  # fmt: skip
        self.critic = AgentNetwork(
            sp.n_agents, self.critic_in_dim, 1, self.hidden_sizes_of("critic"), c.activation,
            shared=c.share_critic, members=c.n_critics,
        )  # fmt: skip
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        target = c.target_entropy if c.target_entropy is not None else -float(sp.act_dim)
        self.temperature = EntropyTemperature(c.alpha, target_entropy=target, tune=c.auto_alpha)
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
        """Every agent's sampled action in [-1, 1], shaped as the action space; the mean
        actions when testing with ``deterministic_eval``."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            rows, _ = self.split_obs(self.obs_tensor(batch.obs))
            act, _ = self.actor(rows, deterministic=greedy, with_log_prob=False)
        return Batch(act=self.env_act(act), state=state)

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``[B, n]``: each agent's soft value of the next step under the current actors."""
        rows, x = self.split_obs(obs_next)
        act, logp = self.actor(rows)
        q = self.critic_target(self.critic_input(x, act)).squeeze(-1).min(dim=0).values
        return q - self.alpha * logp

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        rows, x = self.split_obs(self.obs_tensor(batch.obs))
        act = self.joint_act(batch.act)

        q = self.critic(self.critic_input(x, act)).squeeze(-1)  # [n_critics, B, n]
        critic_loss, td = self.td_loss(q, batch)
        self.critic_step.step(critic_loss)

        # agent i's actor: its own reparameterised sample, the others' actions as stored
        with self.critic_step.frozen():
            own, logp = self.actor(rows)
            mixed = self.own_action(own, act)
            q_own = self.critic(self.critic_input(x, mixed)).squeeze(-1).min(dim=0).values
            actor_loss = (self.alpha * logp - q_own).mean(dim=0).sum()
            self.actor_step.step(actor_loss)

        stats: dict[str, Any] = {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q": q_own.detach().mean(),
            "entropy": -logp.detach().mean(),
        }
        if self.temperature.tune:
            self.temperature.update(-logp.detach())
            stats["alpha"] = self.alpha

        self.critic_target.update()
        self.gradient_steps += 1
        self.critic_stats(batch, td)
        return stats
