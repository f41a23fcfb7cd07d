"""Discrete CQL: QR-DQN learned from a fixed dataset, kept from overestimating the actions the
dataset never took.

Offline, a Q-learner bootstraps from ``max_a Q(s', a)`` over actions it never sees the outcome
of, and errors there only grow. CQL(H) adds to the loss the gap between a soft maximum of Q over
all actions and Q of the action the dataset took::

    Q(s, a)   = mean_i theta_i(s, a)                          (QR-DQN's quantiles, as for acting)
    penalty   = mean over the batch [ log sum_a exp Q(s, a) - Q(s, a_data) ]
    loss      = quantile_huber(theta(s, a_data), target) + alpha_cql * penalty

so Q is pushed down everywhere in proportion to ``exp Q`` and up on the data: the learned Q
lower-bounds the policy's value where the data says nothing. The target is QR-DQN's n-step
target (``partial + discount * theta_target(s', a*)``, double by default). A prioritized
sampler's weights weigh both terms of each sample.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import mask_logits, observation_mask, quantile_huber_loss
from rlblocks.contracts import Batch
from rlblocks_algo_discrete_cql.config import DiscreteCQLConfig
from rlblocks_algo_qrdqn.qrdqn import QRDQNPolicy


class DiscreteCQLPolicy(QRDQNPolicy):
    """QR-DQN with CQL(H)'s conservative penalty, for the offline trainer. Acting is QR-DQN's:
    greedy on the mean of the quantiles (``eps_test`` of the actions random in tests)."""

    config: DiscreteCQLConfig

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DiscreteCQLConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(
            observation_space, action_space, config or DiscreteCQLConfig(), device, **nets
        )

    def conservative_penalty(
        self, q: torch.Tensor, act: torch.Tensor, legal: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per sample ``log sum_a exp Q(s, a) - Q(s, a_data)`` (``[B]``, never negative) for
        Q-values ``q`` ``[B, A]`` and the dataset's actions ``act`` ``[B]``; the sum over the
        legal actions of an action mask ``legal`` when there is one."""
        lse = torch.logsumexp(mask_logits(q, legal), dim=1)
        return lse - q.gather(1, act.unsqueeze(1)).squeeze(1)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        target = self.target_quantiles(batch)
        act = self.actions_tensor(batch)
        obs = self.obs_tensor(batch.obs)
        z = self.quantiles(obs, self.model)  # [B, A, N]
        pred = z[torch.arange(len(act), device=self.device), act]  # [B, N]
        td = quantile_huber_loss(pred, target, self.taus, self.config.kappa)
        legal = observation_mask(obs) if self.masked else None
        gap = self.conservative_penalty(z.mean(dim=2), act, legal)
        per_sample = td + self.config.alpha_cql * gap
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = td.detach()  # priorities follow the TD error, not the penalty
        return {
            "loss": loss.detach(),
            "td_loss": td.detach().mean(),
            "cql_gap": gap.detach().mean(),
            "q": pred.detach().mean(),
        }
