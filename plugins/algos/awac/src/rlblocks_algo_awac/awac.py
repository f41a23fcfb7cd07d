"""AWAC (Nair, Gupta, Dalal & Levine, 2020, "AWAC: Accelerating Online Reinforcement Learning
with Offline Datasets"), for Box actions, trained offline.

AWAC is made to learn from a dataset first and then go on learning online from its own play,
with the same update throughout; this plugin is its offline phase: it trains with
:class:`rlblocks.trainers.OfflineTrainer` on a fixed dataset ``D = {(s, a, r, s')}``, and its
policy is the starting point of an online run. Box actions are in the policy's [-1, 1] units,
as rlblocks buffers store them. This module follows the paper in its order.

1. The critics evaluate the current policy as SAC's twin critics do (without SAC's entropy
   term: the authors run it with ``alpha = 0``), with Polyak-averaged targets ``Q'``::

       y   = r + gamma (1 - terminated) min_i Q'_i(s', a'),   a' ~ pi(.|s')
       L_Q = sum_i mean_B (Q_i(s, a) - y)^2

2. The policy improves within the data: the dataset's actions are cloned, each weighted by
   the exponentiated advantage (the paper's equation 13, the closed-form solution of
   maximising the advantage under a KL constraint to the behaviour policy)::

       A(s, a) = min_i Q_i(s, a) - min_i Q_i(s, a~),      a~ ~ pi(.|s)   (one sample for V)
       w       = B softmax_B(A / lam)          (normalize_weights; else exp(A / lam))
       L_pi    = -mean_B w log pi(a|s)

   ``w`` carries no gradient and is clipped at ``max_weight`` when one is set. The policy's
   Adam has an L2 weight decay (``actor_weight_decay``).

3. The target critics move ``tau`` towards the critics every step.

Both losses are computed from the networks as they are at the start of the step (the
advantage uses the critics before their update, as the authors' trainer does), then both
step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.contracts import Batch
from rlblocks_algo_awac.config import AWACConfig


def advantage_weights(
    advantage: torch.Tensor, lam: float, normalize: bool, max_weight: float | None
) -> torch.Tensor:
    """The policy's weights ``[B]`` for the advantages ``[B]`` of a batch: ``B *
    softmax(A / lam)`` over the batch (``normalize``; their mean is 1) or ``exp(A / lam)``,
    then clipped at ``max_weight`` (None: not clipped)."""
    scaled = advantage / lam
    w = torch.softmax(scaled, dim=0) * scaled.shape[0] if normalize else torch.exp(scaled)
    return w if max_weight is None else w.clamp(max=max_weight)


class AWACPolicy(OffPolicyPolicy):
    """AWAC for Box actions (see :class:`AWACConfig`)."""

    config: AWACConfig

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: AWACConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or AWACConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"AWAC needs a Box action space, got {action_space}")
        c = self.config = config
        self.critic = self.q_ensemble(n=2)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.actor = self.gaussian_actor((c.log_std_min, c.log_std_max))
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor",
            OptimizerStep(
                self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm,
                weight_decay=c.actor_weight_decay,
            ),
        )  # fmt: skip
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Actions ``[B, act_dim]`` in [-1, 1]: a sample, clipped to the bounds, or the mean when
        testing with ``deterministic_eval``."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            dist = self.actor(self.obs_tensor(batch.obs))
            act = dist.mean if greedy else dist.sample().clamp(-1.0, 1.0)
        return Batch(act=act.cpu().numpy(), state=state)

    # -- 1. the critics' target -----------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``min_i Q'_i(s', a')`` with ``a' ~ pi(.|s')`` (clipped to [-1, 1])."""
        act_next = self.actor(obs_next).sample().clamp(-1.0, 1.0)
        return self.critic_target(obs_next, act_next).min(dim=0).values

    # -- the gradient step ------------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)
        dist = self.actor(obs)

        # 2. (first half) the advantage, from the critics before their step
        with torch.no_grad():
            act_pi = dist.sample().clamp(-1.0, 1.0)
            v = self.critic(obs, act_pi).min(dim=0).values

        # 1. the critics: TD error to y (process_fn's batch.returns)
        q = self.critic(obs, act)  # [2, B]
        td = q - batch.returns
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)

        # 2. the policy: the dataset's actions, weighted by the exponentiated advantage
        advantage = q.detach().min(dim=0).values - v
        w = advantage_weights(advantage, c.lam, c.normalize_weights, c.max_weight)
        if weight is not None:
            w = w * weight
        actor_loss = -(w * dist.log_prob(act)).mean()
        self.actor_step.step(actor_loss)

        # 3. the target critics
        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs().mean(dim=0)
        return {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q/data": q.detach().mean(),
            "advantage": advantage.mean(),
            "weight/max": w.max(),
        }
