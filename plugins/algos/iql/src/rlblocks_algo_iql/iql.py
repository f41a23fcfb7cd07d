"""IQL (Kostrikov, Nair & Levine, 2021, "Offline Reinforcement Learning with Implicit
Q-Learning"), for Box and Discrete actions.

Offline RL from a fixed dataset ``D = {(s, a, r, s')}``, trained by
:class:`rlblocks.trainers.OfflineTrainer`. A critic that bootstraps from ``max_a Q(s', a)``
reads Q on actions the dataset never took, where nothing corrects it. IQL never does: every
network learns from the dataset's own actions only, and the maximum over actions is replaced by
an upper expectile of Q over the actions the dataset took in a state. This module follows the
paper in that order. Box actions are in the policy's [-1, 1] units, as rlblocks buffers store
them; Discrete ones are indices from 0 (``map_action`` adds the space's ``start``).

1. The state value ``V`` is the ``tau``-expectile (``expectile``) of the target critics' ``Q``
   over the dataset's actions (the paper's equation 5)::

       L_V = mean_B L2_tau( min_i Q'_i(s, a) - V(s) ),   L2_tau(u) = |tau - 1(u < 0)| u^2

   With ``tau = 0.5`` this is the mean of Q under the behaviour policy; as ``tau`` nears 1 it
   nears the largest Q of an action the dataset supports.

2. The twin critics regress on the value of the next state, never on an action there (its
   equation 6)::

       y   = r + gamma (1 - terminated) V(s')
       L_Q = sum_i mean_B (Q_i(s, a) - y)^2

3. The policy is extracted by advantage-weighted regression (its equation 7): the dataset's
   actions are cloned, each weighted by how much better than ``V`` the critics find it::

       w    = min( exp(beta (min_i Q'_i(s, a) - V(s))), max_weight )       (no gradient)
       L_pi = -mean_B w log pi(a|s)

   (with the deterministic policy, ``log pi(a|s)`` is replaced by ``-|pi(s) - a|^2``). The
   policy never feeds back into 1. and 2.: they are fitted to the dataset alone.

4. The target critics move ``tau`` (``config.tau``) towards the critics every step.

The authors' step updates ``V`` first and reads the updated ``V`` for the policy's weights and
the critics' target; here the target ``y`` is computed when the batch is drawn and the weights
reuse ``V(s)`` of step 1, both with ``V`` as it was before this step's update (one gradient
step apart, which saves a forward pass of ``V``; the captured CUDA-graph step needs the target
computed that way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import (
    BasePolicy,
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    mask_distribution,
    observation_mask,
)
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch, Buffer, ConfigError, has_action_mask
from rlblocks_algo_iql.config import IQLConfig


# -- the paper's two functions ---------------------------------------------------------------------
def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``L2_tau(u) = |tau - 1(u < 0)| u^2`` elementwise, ``u = diff``, ``tau = expectile``: the
    squared error weighted ``tau`` where ``u >= 0`` and ``1 - tau`` where ``u < 0``. Minimised
    over a constant ``v`` (``diff = x - v``), its mean gives the ``tau``-expectile of ``x``."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return weight * diff.pow(2)


def advantage_weights(advantage: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    """``min(exp(beta * advantage), max_weight)`` elementwise: the policy extraction's weights
    (computed without gradient). ``beta = 0`` gives 1 everywhere."""
    return torch.exp(beta * advantage).clamp(max=max_weight)


# -- the networks ----------------------------------------------------------------------------------
class StateValue(nn.Module):
    """``V(s)`` ``[B]``: an MLP over its own encoder."""

    def __init__(self, encoder: nn.Module, hidden: Sequence[int], activation: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = MLP(int(encoder.out_dim), hidden, 1, activation=activation)

    def forward(self, obs: Any) -> torch.Tensor:
        return self.net(self.encoder(obs)).squeeze(-1)


class IQLPolicy(OffPolicyPolicy):
    """IQL for Box or Discrete actions (see :class:`IQLConfig`)."""

    config: IQLConfig

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: IQLConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or IQLConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.masked = self.discrete and has_action_mask(observation_space)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"IQL needs a Box or Discrete action space, got {action_space}")
        c = self.config = config
        if self.discrete and c.deterministic_actor:
            raise ConfigError(
                "algo.deterministic_actor is a policy for Box actions, and this env's actions "
                f"are {action_space}; set algo.deterministic_actor=false (Discrete actions get "
                "a categorical policy)"
            )
        # 2. and 4.: twin critics and their targets; 1.: the state value, over its own encoder
        self.critic = self.q_ensemble(n=2)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.value = StateValue(self.make_encoder(), self.hidden_sizes_of("critic"), c.activation)
        # 3. the policy
        self.actor: nn.Module = self._make_actor()
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )
        self.value_step = self.add_optimizer(
            "value", OptimizerStep(self.value, c.value_lr, max_grad_norm=c.max_grad_norm)
        )

    def _make_actor(self) -> nn.Module:
        c = self.config
        if self.discrete:
            return self.categorical_actor()
        if c.deterministic_actor:
            return self.deterministic_actor()
        return self.gaussian_actor((c.log_std_min, c.log_std_max))

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Actions for ``batch.obs``: Box ``[B, act_dim]`` in [-1, 1] (a sample, clipped to the
        bounds, or the mean when testing with ``deterministic_eval``), Discrete ``[B]`` (a
        sample, or the most likely action; indices from 0, ``map_action`` adds the space's
        ``start``)."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            obs = self.obs_tensor(batch.obs)
            out = self.actor(obs)
            if self.masked:  # legal actions only
                out = mask_distribution(out, observation_mask(obs))
            if self.discrete:
                act = out.mode() if greedy else out.sample()
            elif isinstance(out, torch.Tensor):  # the deterministic policy
                act = out
            else:
                act = out.mean if greedy else out.sample().clamp(-1.0, 1.0)
        return Batch(act=act.cpu().numpy(), state=state)

    # -- the pieces of the step ---------------------------------------------------------------
    def actions_tensor(self, act: Any) -> torch.Tensor:
        """The dataset's actions as the networks read them: float ``[B, act_dim]`` (Box) or
        int64 indices ``[B]`` (Discrete)."""
        if self.discrete:
            return torch.as_tensor(act, dtype=torch.long, device=self.device)
        return self.as_tensor(act)

    def q_data(self, critic: nn.Module, obs: Any, act: torch.Tensor) -> torch.Tensor:
        """``Q_i(s, a)`` ``[n, B]`` of every member of ``critic`` at the dataset's actions."""
        if not self.discrete:
            return critic(obs, act)
        q = critic(obs)  # [n, B, A]
        return q.gather(2, act.view(1, -1, 1).expand(q.shape[0], -1, 1)).squeeze(2)

    def log_likelihood(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        """``log pi(a|s)`` ``[B]`` of the dataset's actions; ``-|pi(s) - a|^2`` for the
        deterministic policy."""
        out = self.actor(obs)
        if isinstance(out, torch.Tensor):
            return -(out - act).pow(2).sum(dim=-1)
        if self.masked:  # the masked distribution's likelihood
            out = mask_distribution(out, observation_mask(obs))
        return out.log_prob(act)

    def target_value(self, obs_next: Any) -> torch.Tensor:
        """2.: ``V(s')``, the bootstrap value of the critics' target (no action at ``s'``)."""
        return self.value(obs_next)

    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """One gradient step; captured as a CUDA graph (``cuda_graph``) for Box actions, eager
        for Discrete ones (whose integer actions the captured step does not carry)."""
        if self.discrete:
            return BasePolicy.update(self, sample_size, buffer, **kwargs)
        return super().update(sample_size, buffer, **kwargs)

    # -- the gradient step ----------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        obs = self.obs_tensor(batch.obs)
        act = self.actions_tensor(batch.act)
        weight = self.weights(batch)

        # 1. V: the expectile of the target critics' Q over the dataset's actions
        with torch.no_grad():
            q_target = self.q_data(self.critic_target, obs, act).min(dim=0).values  # [B]
        v = self.value(obs)
        value_loss = expectile_loss(q_target - v, c.expectile)
        value_loss = (value_loss * weight if weight is not None else value_loss).mean()
        self.value_step.step(value_loss)

        # 2. the critics: regression on r + gamma V(s') (process_fn's batch.returns)
        td = self.q_data(self.critic, obs, act) - batch.returns  # [2, B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)

        # 3. the policy: the dataset's actions, weighted by the exponentiated advantage
        advantage = q_target - v.detach()
        w = advantage_weights(advantage, c.beta, c.max_weight)
        if weight is not None:
            w = w * weight
        actor_loss = -(w * self.log_likelihood(obs, act)).mean()
        self.actor_step.step(actor_loss)

        # 4. the target critics
        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs().mean(dim=0)
        return {
            "loss/critic": critic_loss.detach(),
            "loss/value": value_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "v": v.detach().mean(),
            "advantage": advantage.mean(),
            "weight": w.mean(),
        }
