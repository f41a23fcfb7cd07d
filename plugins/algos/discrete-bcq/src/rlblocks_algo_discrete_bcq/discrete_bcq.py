"""Discrete BCQ (Fujimoto, Conti, Ghavamzadeh & Pineau, 2019, "Benchmarking Batch Deep
Reinforcement Learning Algorithms"), for Discrete actions.

Offline, a Q-learner bootstraps from ``max_a Q(s', a)`` over every action, including those the
dataset never took at ``s'``, whose values nothing corrects; the greedy policy then follows
them. Discrete BCQ learns, next to ``Q``, a model ``G(a|s)`` of the behaviour policy (behaviour
cloning) and lets ``Q`` choose only among the actions ``G`` finds likely enough. This module
follows the paper in order.

1. The network: one observation encoder and two heads over its features, a Q head ``Q(s, .)``
   and a behaviour-cloning head of logits, ``G(.|s) = softmax(logits)``.

2. The allowed actions: ``a`` is allowed at ``s`` when its probability relative to the most
   likely action's passes the threshold ``tau``::

       allowed(s) = { a : G(a|s) / max_a' G(a'|s) > tau }

   (the softmax's normaliser cancels: ``logits(a) - max logits > log tau``; ``tau = 0`` allows
   every action).

3. The target: the online network picks the best allowed action at ``s'``, the target network
   values it (as double DQN, on the allowed actions only)::

       a'  = argmax_{a in allowed(s')} Q(s', a)
       y   = r + gamma (1 - terminated) Q_target(s', a')

   (n-step with ``n_step``: the real rewards of ``n`` steps, then ``gamma^n`` times the value
   at the ``n``-th next state.)

4. The loss, one gradient step on the whole network::

       L = Huber(Q(s, a) - y) + CE(logits(s), a) + penalty * mean(logits(s)^2)

   and the target network is a hard copy every ``target_update_interval`` steps (or moves
   ``tau`` every step).

5. Acting: ``argmax_{a in allowed(s)} Q(s, a)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import (
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    epsilon_greedy,
    mask_logits,
    masked_epsilon_greedy,
    observation_mask,
)
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch, has_action_mask
from rlblocks_algo_discrete_bcq.config import DiscreteBCQConfig


class BCQNetwork(nn.Module):
    """One observation encoder, a Q head and a behaviour-cloning head over its features:
    ``forward(obs) -> (Q [B, A], logits [B, A])``. ``q_head`` / ``imitation_head`` replace the
    default MLPs by your own modules from features to ``[B, A]``."""

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        hidden: Sequence[int],
        activation: str = "relu",
        q_head: nn.Module | None = None,
        imitation_head: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        features = int(encoder.out_dim)
        self.q_head = q_head if q_head is not None else MLP(
            features, hidden, num_actions, activation=activation
        )  # fmt: skip
        self.imitation_head = imitation_head if imitation_head is not None else MLP(
            features, hidden, num_actions, activation=activation
        )  # fmt: skip

    def forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.encoder(obs)
        return self.q_head(features), self.imitation_head(features)

    def q_values(self, obs: Any) -> torch.Tensor:
        """The Q head alone, ``[B, A]``."""
        return self.q_head(self.encoder(obs))


def allowed_actions(logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """``G(a|s) / max_a' G(a'|s) > threshold`` for ``G = softmax(logits)``: a boolean mask
    ``[B, A]``, computed on the logits (the softmax's normaliser cancels in the ratio). The most
    likely action is always allowed (``threshold < 1``)."""
    log_threshold = math.log(threshold) if threshold > 0 else -math.inf
    return logits - logits.max(dim=1, keepdim=True).values > log_threshold


def best_allowed(q: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``argmax_{a allowed} Q(s, a)``, ``[B]``."""
    return q.masked_fill(~allowed, -math.inf).argmax(dim=1)


class DiscreteBCQPolicy(OffPolicyPolicy):
    """Discrete BCQ for the offline trainer (see :class:`DiscreteBCQConfig`). ``encoder`` is
    your observation encoder, ``critic`` your Q head and ``actor`` your behaviour-cloning head
    (each over the encoder's features, to ``[B, A]``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DiscreteBCQConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or DiscreteBCQConfig()
        super().__init__(observation_space, action_space, config, device, **nets)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"discrete BCQ needs a Discrete action space, got {action_space}; for Box "
                "actions use bcq"
            )
        c = self.config = config
        self.num_actions = int(action_space.n)
        self.masked = has_action_mask(observation_space)
        # 1. the network: encoder, Q head, behaviour-cloning head
        encoder = self.make_encoder()
        features, a = int(encoder.out_dim), self.num_actions
        q_heads = self.critic_heads(1, features, a, f"Q of each of the {a} actions")
        self.model = BCQNetwork(
            encoder, a, c.hidden_sizes, c.activation,
            q_head=q_heads[0] if q_heads else None,
            imitation_head=self.actor_head(
                features, a, f"the behaviour policy's logits of the {a} actions"
            ),
        )  # fmt: skip
        self.target = TargetNetwork(
            self.model, tau=c.tau, hard_update_interval=c.target_update_interval
        )
        self.to(self.device)
        self.optim_step = self.add_optimizer(
            "q", OptimizerStep(self.model, c.lr, max_grad_norm=c.max_grad_norm, eps=c.adam_eps)
        )

    # -- 5. acting ------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """The best allowed action index of each state (``eps_test`` of them random in test
        mode; :meth:`map_action` adds the space's ``start`` for the env):
        ``Batch(act [B], logits=Q [B, A])``."""
        with torch.no_grad():
            obs = self.obs_tensor(batch.obs)
            q, logits = self.model(obs)
            legal = observation_mask(obs) if self.masked else None
            act = best_allowed(q, self.allowed(logits, legal)).cpu().numpy()
        if not self.training and self.config.eps_test:
            if legal is not None:
                act = masked_epsilon_greedy(act, self.config.eps_test, legal, self._rng)
            else:
                act = epsilon_greedy(act, self.config.eps_test, self.num_actions, 0, self._rng)
        return Batch(act=act, logits=q, state=state)

    def allowed(self, logits: torch.Tensor, legal: torch.Tensor | None) -> torch.Tensor:
        """The actions BCQ may pick ``[B, A]``: likely enough under the behaviour model and,
        under an action mask, legal (the behaviour model's ratio taken over legal actions)."""
        if legal is None:
            return allowed_actions(logits, self.config.threshold)
        return allowed_actions(mask_logits(logits, legal), self.config.threshold) & legal

    # -- 3. the target --------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``Q_target(s', a')`` with ``a'`` the online network's best allowed action at ``s'``."""
        q, logits = self.model(obs_next)
        legal = observation_mask(obs_next) if self.masked else None
        best = best_allowed(q, self.allowed(logits, legal))
        return self.target.net.q_values(obs_next).gather(1, best.unsqueeze(1)).squeeze(1)

    # -- 4. the loss ----------------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        q, logits = self.model(self.obs_tensor(batch.obs))
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)
        q_taken = q.gather(1, act.unsqueeze(1)).squeeze(1)
        target = batch.returns
        if c.loss == "huber":
            td_loss = F.smooth_l1_loss(q_taken, target, reduction="none")
        else:
            td_loss = (q_taken - target).pow(2)
        weight = self.weights(batch)
        if weight is not None:
            td_loss = td_loss * weight
        td_loss = td_loss.mean()
        imitation_loss = F.cross_entropy(logits, act)
        penalty = logits.pow(2).mean()
        loss = td_loss + imitation_loss + c.imitation_logit_penalty * penalty
        self.optim_step.step(loss)
        self.gradient_steps += 1
        self.target.update()
        batch.td_error = (q_taken - target).detach().abs()
        return {
            "loss": loss.detach(),
            "loss/td": td_loss.detach(),
            "loss/imitation": imitation_loss.detach(),
            "q": q_taken.detach().mean(),
        }
