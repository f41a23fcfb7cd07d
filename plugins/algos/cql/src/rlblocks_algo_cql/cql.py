"""CQL (Kumar, Zhou, Tucker & Levine, 2020, "Conservative Q-Learning for Offline Reinforcement
Learning"), the CQL(H) variant on SAC, for Box actions.

Offline RL from a fixed dataset ``D = {(s, a, r, s')}``, trained by
:class:`rlblocks.trainers.OfflineTrainer`. A critic trained by Bellman backups alone on ``D``
overestimates the actions ``D`` never tried, and a policy that maximises it goes straight to
them. CQL keeps SAC (Haarnoja et al., 2018: twin critics ``Q_1, Q_2`` with Polyak-averaged
targets ``Q'``, a tanh-squashed Gaussian policy ``pi`` and an entropy temperature ``alpha``)
and adds one term to the critics' loss that pushes ``Q`` down on all actions, most where it
is highest (a soft maximum), and up on the dataset's actions. This module follows the paper in that
order. Actions are in the policy's [-1, 1] units, as rlblocks buffers store them.

1. The critics' Bellman error is SAC's, with the backup of the paper's CQL objectives:
   ``Q`` alone, without SAC's entropy term (unless ``backup_entropy``)::

       y     = r + gamma (1 - terminated) min_i Q'_i(s', a'),     a' ~ pi(.|s')
       L_TD  = sum_i mean_B (Q_i(s, a) - y)^2

2. The conservative penalty of CQL(H) (the paper's equation 4), per critic::

       gap_i = mean_B [ log sum_a exp Q_i(s, a)  -  Q_i(s, a_D) ]
       L_Q   = L_TD + alpha_cql sum_i gap_i

   ``log sum_a exp Q(s, a)`` over a continuous action space is estimated by importance
   sampling (the paper's appendix), with ``N = num_sampled_actions`` actions from each of three
   proposals at the state ``s``: uniform actions (density ``2^-dim(A)`` on [-1, 1]^dim(A)), the
   policy's actions at ``s`` and the policy's actions at ``s'`` (densities ``pi(a|s)`` and
   ``pi(a|s')``), every ``Q`` weighed by its proposal's density::

       log sum_a exp Q(s, a)  ~  logsumexp_{k = 1..3N} [ Q(s, a_k) - log q_k(a_k) ]

   Each group's mean of ``exp(Q) / q`` estimates the integral of ``exp Q(s, .)``; the log of
   their average is the expression above minus the constant ``log(3N)``, which changes no
   gradient. It is left in, as in the authors' code, so that the gap, and the Lagrange
   threshold below, are on the scale of their published thresholds. The sampled actions carry
   no gradient: the penalty trains the critics only.

3. Optionally (``with_lagrange``) ``alpha_cql`` is the multiplier of the constraint
   ``gap <= target_action_gap`` (the paper's CQL-Lagrange), learned by dual gradient ascent
   on ``log alpha_cql`` with its own Adam::

       L_Q            = L_TD + alpha_cql sum_i (gap_i - target_action_gap)
       L(alpha_cql)   = -alpha_cql mean_i (gap_i - target_action_gap)   (gap held constant)

   so ``alpha_cql`` grows while the gap is above the threshold and shrinks while below; it is
   kept at or below ``alpha_cql_max``.

4. The policy improves as SAC's, on the updated critics, except for a warm start: for the
   first ``bc_steps`` gradient steps it clones the dataset's actions instead::

       L_pi = mean_B (alpha log pi(a~|s) - min_i Q_i(s, a~)),     a~ ~ pi(.|s), reparameterised
       L_pi = mean_B (alpha log pi(a~|s) - log pi(a_D|s))         (the first bc_steps steps)

5. The temperature follows SAC's automatic tuning, ``L(log alpha) = -mean(log alpha (log
   pi(a~|s) + target_entropy))`` (``auto_alpha``), and every target critic moves ``tau``
   towards its critic.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import EntropyTemperature, OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.algo.nets import SquashedGaussianActor
from rlblocks.contracts import Batch
from rlblocks_algo_cql.config import CQLConfig

_LOG_2 = math.log(2.0)


def squashed_log_prob(actor: SquashedGaussianActor, obs: Any, act: torch.Tensor) -> torch.Tensor:
    """``log pi(a|s)`` ``[B]`` of the dataset's actions ``a`` in [-1, 1] under the squashed
    Gaussian ``actor`` (the behaviour-cloning warm start's objective; core's
    :meth:`~rlblocks.algo.nets.SquashedGaussianActor.log_prob`)."""
    return actor.log_prob(obs, act)


class CQLPolicy(OffPolicyPolicy):
    """CQL(H) on SAC for Box observations and actions (see :class:`CQLConfig`)."""

    _alpha_cql_fixed: torch.Tensor

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CQLConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or CQLConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(
                f"CQL needs a Box action space, got {action_space}; this plugin is the paper's "
                "continuous-action CQL(H) on SAC"
            )
        c = self.config = config
        # SAC's networks: a squashed Gaussian policy, twin critics and their targets
        self.actor = self.squashed_gaussian_actor((c.log_std_min, c.log_std_max))
        self.critic = self.q_ensemble(n=2)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy if c.target_entropy is not None else -self.act_dim,
            tune=c.auto_alpha,
        )
        # the penalty's weight: fixed, or learned in log space (the Lagrange multiplier)
        self.register_buffer("_alpha_cql_fixed", torch.tensor(float(c.alpha_cql)), persistent=False)
        if c.with_lagrange:
            self.log_alpha_cql = nn.Parameter(torch.tensor(float(c.alpha_cql)).log())
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )
        self.temperature.attach(self, c.alpha_lr)
        self.alpha_cql_step: OptimizerStep | None = None
        if c.with_lagrange:
            self.alpha_cql_step = self.add_optimizer(
                "alpha_cql", OptimizerStep([self.log_alpha_cql], c.alpha_cql_lr)
            )

    @property
    def alpha(self) -> torch.Tensor:
        """The current entropy temperature (a 0-d tensor, no gradient)."""
        return self.temperature.alpha

    @property
    def alpha_cql(self) -> torch.Tensor:
        """The current weight of the conservative penalty (a 0-d tensor, no gradient)."""
        if not self.config.with_lagrange:
            return self._alpha_cql_fixed
        return self.log_alpha_cql.detach().exp().clamp(max=self.config.alpha_cql_max)

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

    # -- 1. the critics' Bellman target ---------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``min_i Q'_i(s', a')`` with ``a' ~ pi(.|s')``, minus ``alpha * log pi(a'|s')`` with
        ``backup_entropy``."""
        act_next, logp_next = self.actor(obs_next)
        value = self.critic_target(obs_next, act_next).min(dim=0).values
        if self.config.backup_entropy:
            value = value - self.alpha * logp_next
        return value

    # -- 2. the conservative penalty ------------------------------------------------------------
    @torch.no_grad()
    def proposal_actions(
        self, obs: torch.Tensor, obs_next: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``3N`` actions per state the penalty's estimate evaluates and their proposals'
        log densities: ``([B, 3N, act_dim], [B, 3N])``, in the order uniform, ``pi(.|s)``,
        ``pi(.|s')`` (``N = num_sampled_actions``; no gradient)."""
        n, dim, rows = self.config.num_sampled_actions, self.act_dim, obs.shape[0]
        uniform = torch.rand((rows, n, dim), device=obs.device) * 2.0 - 1.0
        log_uniform = torch.full((rows, n), -dim * _LOG_2, device=obs.device)
        # one pass of the actor over both states [s_1..s_B, s'_1..s'_B], n samples of each
        sampled, logp = self.actor.sample(torch.cat([obs, obs_next]), n)
        at_s, at_next = sampled.view(2, rows, n, dim).unbind(0)
        logp_s, logp_next = logp.view(2, rows, n).unbind(0)
        actions = torch.cat([uniform, at_s, at_next], dim=1)
        log_density = torch.cat([log_uniform, logp_s, logp_next], dim=1)
        return actions, log_density

    def conservative_gap(
        self,
        obs: torch.Tensor,
        q_data: torch.Tensor,
        actions: torch.Tensor,
        log_density: torch.Tensor,
    ) -> torch.Tensor:
        """``gap_i = mean_B [logsumexp_k (Q_i(s, a_k) - log q_k(a_k)) - Q_i(s, a_D)]`` per
        critic, ``[n_critics]``, from the dataset's ``Q_i(s, a_D)`` (``q_data``, ``[n, B]``) and
        the sampled ``actions`` ``[B, K, act_dim]`` with their ``log_density`` ``[B, K]``.
        Differentiable in the critics."""
        rows, k, dim = actions.shape
        q = self.critic(obs.repeat_interleave(k, dim=0), actions.reshape(rows * k, dim))
        soft_max = torch.logsumexp(q.view(-1, rows, k) - log_density, dim=-1)  # [n, B]
        return (soft_max - q_data).mean(dim=1)

    # -- 3. the Lagrange multiplier ---------------------------------------------------------------
    def update_alpha_cql(self, gap: torch.Tensor) -> None:
        """One Adam step on ``log alpha_cql`` against ``L = -alpha_cql mean_i (gap_i -
        target_action_gap)`` (the gap detached), then the clamp at ``alpha_cql_max``."""
        assert self.alpha_cql_step is not None
        c = self.config
        # dL/d(log alpha_cql) = -alpha_cql * mean(gap - threshold), in closed form
        grad = -(self.alpha_cql * (gap.detach() - c.target_action_gap).mean())
        self.alpha_cql_step.step_with_grads([grad])
        with torch.no_grad():
            self.log_alpha_cql.clamp_(max=math.log(c.alpha_cql_max))

    # -- the gradient step ------------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        obs = self.obs_tensor(batch.obs)
        obs_next = self.obs_tensor(batch.obs_next)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        # 1. Bellman error of every critic on the soft target y (process_fn's batch.returns)
        q_data = self.critic(obs, act)  # [2, B]
        td = q_data - batch.returns
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        td_loss = sq.mean(dim=1).sum()

        # 2. the conservative penalty (3. minus the threshold when alpha_cql is a multiplier)
        actions, log_density = self.proposal_actions(obs, obs_next)
        gap = self.conservative_gap(obs, q_data, actions, log_density)  # [2]
        alpha_cql = self.alpha_cql
        excess = gap - c.target_action_gap if c.with_lagrange else gap
        cql_loss = (alpha_cql * excess).sum()
        self.critic_step.step(td_loss + cql_loss)
        if c.with_lagrange:
            self.update_alpha_cql(gap)

        # 4. the policy: behaviour cloning first, then SAC's improvement step on the critics
        act_new, logp = self.actor(obs)
        if self.gradient_steps < c.bc_steps:
            objective = squashed_log_prob(self.actor, obs, act)
        else:
            with self.critic_step.frozen():
                objective = self.critic(obs, act_new).min(dim=0).values
        actor_loss = (self.alpha * logp - objective).mean()
        self.actor_step.step(actor_loss)

        # 5. the temperature and the target critics
        if self.temperature.tune:
            self.temperature.update(-logp.detach())
        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = td.detach().abs().mean(dim=0)
        stats: dict[str, Any] = {
            "loss/critic": td_loss.detach(),
            "loss/cql": cql_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "cql/gap": gap.detach().mean(),
            "q/data": q_data.detach().mean(),
            "entropy": -logp.detach().mean(),
        }
        if self.temperature.tune:
            stats["alpha"] = self.alpha
        if c.with_lagrange:
            stats["alpha_cql"] = self.alpha_cql
        return stats
