"""CRR (Wang et al., 2020, "Critic Regularized Regression"), for Box and Discrete actions, with
a plain critic.

Offline RL from a fixed dataset ``D = {(s, a, r, s')}``, trained by
:class:`rlblocks.trainers.OfflineTrainer`. The policy learns by regression on the dataset's
actions, as behaviour cloning does, but each action counts by what a critic says of it: actions
better than the policy's own are imitated, worse ones filtered out. The policy never chases Q to
actions the dataset did not take, so the critic's errors there cannot mislead it. This module
follows the paper in that order. Box actions are in the policy's [-1, 1] units, as rlblocks
buffers store them; Discrete ones are indices from 0 (``map_action`` adds the space's
``start``).

1. The critic evaluates the policy by TD learning, with target networks ``Q'`` and ``pi'``
   (the paper's is distributional; this one regresses on the expected value)::

       y   = r + gamma (1 - terminated) Q'(s', a'),   a' ~ pi'(.|s')
       L_Q = mean_B (Q(s, a) - y)^2

   For Discrete actions the expectation over ``a'`` is exact: ``sum_a' pi'(a'|s') Q'(s', a')``.

2. The advantage of each dataset action over the policy, with ``m`` (``num_action_samples``)
   actions ``a_j ~ pi(.|s)`` (the paper's equation 5 and its max variant)::

       A(s, a) = Q(s, a) - mean_j Q(s, a_j)       (advantage = "mean")
       A(s, a) = Q(s, a) - max_j Q(s, a_j)        (advantage = "max")

   For Discrete actions ``mean`` is the exact ``sum_a' pi(a'|s) Q(s, a')``.

3. The filter ``f`` and the policy's loss (its equations 2 to 4)::

       f = 1(A(s, a) > 0)                            (filter = "binary")
       f = min(exp(A(s, a) / beta), max_weight)      (filter = "exp")
       L_pi = -mean_B f log pi(a|s)                  (f carries no gradient)

4. Every ``target_update_interval`` gradient steps the target networks become copies of the
   online ones (or, with 0, they move ``tau`` towards them every step).

The critic's and the policy's losses are both computed from the networks as they are at the
start of the step (the advantage uses the critic before its update), then both step.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import (
    BasePolicy,
    Categorical,
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    mask_distribution,
    observation_mask,
)
from rlblocks.contracts import Batch, Buffer, has_action_mask
from rlblocks_algo_crr.config import CRRConfig


# -- the paper's filters ---------------------------------------------------------------------------
def binary_filter(advantage: torch.Tensor) -> torch.Tensor:
    """``1(A > 0)`` elementwise, as a float tensor: CRR binary."""
    return (advantage > 0).to(advantage.dtype)


def exp_filter(advantage: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    """``min(exp(A / beta), max_weight)`` elementwise: CRR exp."""
    return torch.exp(advantage / beta).clamp(max=max_weight)


# -- the networks ----------------------------------------------------------------------------------
class CRRPolicy(OffPolicyPolicy):
    """CRR for Box or Discrete actions (see :class:`CRRConfig`)."""

    config: CRRConfig

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CRRConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or CRRConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.masked = self.discrete and has_action_mask(observation_space)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"CRR needs a Box or Discrete action space, got {action_space}")
        c = self.config = config
        self.critic = self.q_ensemble(n=1)
        self.actor: nn.Module = self._make_actor()
        self.critic_target = self._target(self.critic)
        self.actor_target = self._target(self.actor)
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )

    def _target(self, net: nn.Module) -> TargetNetwork:
        # hard updates: every update() is a copy, and learn calls it on the gradient steps the
        # schedule names (counted by gradient_steps, which a checkpoint keeps)
        if self.config.target_update_interval:
            return TargetNetwork(net, tau=None, hard_update_interval=1)
        return TargetNetwork(net, tau=self.config.tau)

    def copies_targets(self) -> bool:
        """Whether the coming gradient step ends by copying the online networks into the
        targets (hard updates: every ``target_update_interval``-th step, counted from the
        run's first)."""
        interval = self.config.target_update_interval
        return bool(interval) and (self.gradient_steps + 1) % interval == 0

    def _make_actor(self) -> nn.Module:
        c = self.config
        if self.discrete:
            return self.categorical_actor()
        return self.gaussian_actor((c.log_std_min, c.log_std_max))

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Actions for ``batch.obs``: Box ``[B, act_dim]`` in [-1, 1] (a sample, clipped to the
        bounds, or the mean when testing with ``deterministic_eval``), Discrete ``[B]`` (a
        sample, or the most likely action; indices from 0, ``map_action`` adds the space's
        ``start``)."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            dist = self.policy_dist(self.actor, self.obs_tensor(batch.obs))
            if self.discrete:
                act = dist.mode() if greedy else dist.sample()
            else:
                act = dist.mean if greedy else dist.sample().clamp(-1.0, 1.0)
        return Batch(act=act.cpu().numpy(), state=state)

    def policy_dist(self, actor: Any, obs: Any) -> Any:
        """``actor``'s distribution at observation tensors ``obs``; over the legal actions
        only when they carry an action mask (Discrete actions)."""
        dist = actor(obs)
        return mask_distribution(dist, observation_mask(obs)) if self.masked else dist

    # -- 1. the critic's target -------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``Q'(s', a')`` with ``a' ~ pi'(.|s')`` (one sample, clipped to [-1, 1]); for Discrete
        actions the exact ``sum_a' pi'(a'|s') Q'(s', a')``."""
        dist = self.policy_dist(self.actor_target, obs_next)
        if self.discrete:
            return (dist.probs * self.critic_target(obs_next)[0]).sum(dim=-1)
        return self.critic_target(obs_next, dist.sample().clamp(-1.0, 1.0))[0]

    # -- 2. the advantage -----------------------------------------------------------------------
    @torch.no_grad()
    def baseline(self, obs: Any, dist: Any, q_all: torch.Tensor | None = None) -> torch.Tensor:
        """The mean or max (``advantage``) of ``Q(s, a_j)`` over ``m`` actions ``a_j ~ pi(.|s)``
        ``[B]``, from the policy's distribution ``dist`` at ``obs``; for Discrete actions
        (``q_all``: ``Q(s, .)`` ``[B, A]``) ``mean`` is the exact expectation under ``pi``."""
        c = self.config
        m = c.num_action_samples
        if self.discrete:
            assert q_all is not None
            if c.advantage == "mean":
                return (dist.probs * q_all).sum(dim=-1)
            logits = dist.logits.unsqueeze(1).expand(-1, m, -1)  # [B, m, A]
            picks = Categorical(logits).sample()  # [B, m]
            return q_all.gather(1, picks).max(dim=1).values
        mean, std = dist.mean, dist.std  # [B, D]
        rows, dim = mean.shape
        samples = mean.unsqueeze(1) + std.unsqueeze(1) * torch.randn(
            rows, m, dim, device=mean.device, dtype=mean.dtype
        )
        samples = samples.clamp(-1.0, 1.0).reshape(rows * m, dim)
        # one encoding of each state, m rows of features per state
        features = self.critic.encoder(obs).repeat_interleave(m, dim=0)
        q = self.critic.net(torch.cat([features, samples], dim=-1))[0].view(rows, m)
        return q.mean(dim=1) if c.advantage == "mean" else q.max(dim=1).values

    # -- 3. the filter ----------------------------------------------------------------------------
    def filter_weights(self, advantage: torch.Tensor) -> torch.Tensor:
        """``f(A)`` of the configured ``filter``, ``[B]``."""
        c = self.config
        if c.filter == "binary":
            return binary_filter(advantage)
        return exp_filter(advantage, c.beta, c.max_weight)

    # -- the gradient step ------------------------------------------------------------------------
    def graph_phase(self) -> Hashable:
        """Whether this step copies the targets (:meth:`copies_targets`): the captured step
        records one graph for each."""
        return self.copies_targets()

    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """One gradient step; captured as a CUDA graph (``cuda_graph``) for Box actions, eager
        for Discrete ones (whose integer actions the captured step does not carry)."""
        if self.discrete:
            return BasePolicy.update(self, sample_size, buffer, **kwargs)
        return super().update(sample_size, buffer, **kwargs)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        weight = self.weights(batch)
        dist = self.policy_dist(self.actor, obs)

        # 1. the critic's TD error (process_fn's batch.returns is y) and 2. the advantage, both
        # from the critic as it is now
        if self.discrete:
            act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)  # indices
            q_all = self.critic(obs)[0]  # [B, A]
            q_data = q_all.gather(1, act.unsqueeze(1)).squeeze(1)
            baseline = self.baseline(obs, dist, q_all.detach())
        else:
            act = self.as_tensor(batch.act)
            q_data = self.critic(obs, act)[0]
            baseline = self.baseline(obs, dist)
        td = q_data - batch.returns
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean()
        self.critic_step.step(critic_loss)

        # 3. the policy: the dataset's actions, filtered by their advantage
        advantage = q_data.detach() - baseline
        f = self.filter_weights(advantage)
        if weight is not None:
            f = f * weight
        actor_loss = -(f * dist.log_prob(act)).mean()
        self.actor_step.step(actor_loss)

        # 4. the target networks: a copy when due, or a Polyak step every step
        if not self.config.target_update_interval or self.copies_targets():
            self.critic_target.update()
            self.actor_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs()
        return {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q/data": q_data.detach().mean(),
            "advantage": advantage.mean(),
            "filter": f.mean(),
        }
