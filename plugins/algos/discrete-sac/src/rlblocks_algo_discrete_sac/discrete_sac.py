"""Discrete SAC (Christodoulou, 2019, "Soft Actor-Critic for Discrete Action Settings").

With ``pi(.|s)`` a categorical over ``A`` actions and critics ``Q_i(s, .)`` giving one value per
action, every expectation over actions is an exact sum::

    y      = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V'(s_{t+m})      (process_fn)
    V'(s') = sum_a pi(a|s') (min_i Q'_i(s', a) - alpha * log pi(a|s'))
    L_Q    = sum_i mean((Q_i(s, a_t) - y)^2)
    L_pi   = mean(sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a)))
    L_a    = mean(log_alpha * (H(pi(.|s)) - target_entropy))                   (auto_alpha)

with ``target_entropy = target_entropy_ratio * log(A)`` (``log`` of the state's legal actions
under an action mask); targets move ``tau`` every step.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import (
    Categorical,
    EntropyTemperature,
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    mask_distribution,
    observation_mask,
)
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch, has_action_mask
from rlblocks_algo_discrete_sac.config import DiscreteSACConfig


class CategoricalActor(nn.Module):
    """``obs -> logits [B, A]`` over an encoder; ``net`` replaces the MLP by your own head from
    features to the logits."""

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        hidden: list[int],
        act: str,
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net if net is not None else MLP(
            int(encoder.out_dim), hidden, num_actions, activation=act
        )  # fmt: skip

    def forward(self, obs: Any) -> Categorical:
        return Categorical(self.net(self.encoder(obs)))


class DiscreteSACPolicy(OffPolicyPolicy):
    """SAC for Discrete actions (see :class:`DiscreteSACConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DiscreteSACConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or DiscreteSACConfig()
        super().__init__(observation_space, action_space, config, device, **nets)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"discrete-sac needs a Discrete action space, got {action_space}; for Box "
                "actions use sac"
            )
        c = self.config = config
        self.num_actions = int(action_space.n)
        self.masked = has_action_mask(observation_space)
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim), self.num_actions, f"logits of the {self.num_actions} actions"
        )
        self.actor = CategoricalActor(
            encoder, self.num_actions, self.hidden_sizes_of("actor"), c.activation, net=head
        )
        self.critic = self.q_ensemble(n=c.n_critics)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy_ratio * math.log(self.num_actions),
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

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sampled actions ``[B]`` (indices from 0; ``map_action`` adds the space's
        ``start``); the most likely action when testing with ``deterministic_eval``."""
        with torch.no_grad():
            dist = self.policy_dist(self.obs_tensor(batch.obs))
            greedy = not self.training and self.config.deterministic_eval
            act = dist.mode() if greedy else dist.sample()
        return Batch(act=act.cpu().numpy(), state=state)

    def policy_dist(self, obs: Any) -> Categorical:
        """The actor's distribution at observation tensors ``obs``, over the legal actions
        only when they carry an action mask (so the soft value is an expectation over them)."""
        dist = self.actor(obs)
        return mask_distribution(dist, observation_mask(obs)) if self.masked else dist

    def target_value(self, obs_next: Any) -> torch.Tensor:
        dist = self.policy_dist(obs_next)
        q_next = self.critic_target(obs_next).min(dim=0).values  # [B, A]
        return (dist.probs * (q_next - self.alpha * dist.logits)).sum(dim=-1)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)  # indices
        weight = self.weights(batch)

        q_all = self.critic(obs)  # [n, B, A]
        q_taken = q_all.gather(2, act.view(1, -1, 1).expand(q_all.shape[0], -1, 1)).squeeze(2)
        td = q_taken - batch.returns
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)

        dist = self.policy_dist(obs)
        q_min = q_all.detach().min(dim=0).values
        actor_loss = (dist.probs * (self.alpha * dist.logits - q_min)).sum(dim=-1).mean()
        self.actor_step.step(actor_loss)
        entropy = dist.entropy().detach()

        stats: dict[str, Any] = {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "entropy": entropy.mean(),
        }
        if self.temperature.tune:
            # L_a = mean(log_alpha * (H(pi(.|s)) - target_entropy)), the exact entropy H;
            # under action masks the target is the ratio of each state's own maximum,
            # log(legal actions): log(A) is out of reach where fewer are legal, which would
            # drive alpha up without bound
            target = None
            if self.masked:
                legal = observation_mask(obs).sum(dim=-1).clamp(min=1).float()
                target = self.config.target_entropy_ratio * torch.log(legal)
            self.temperature.update(entropy, target)
            stats["alpha"] = self.alpha

        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs().mean(dim=0)
        return stats
