"""TQC: SAC with a truncated mixture of distributional quantile critics (Kuznetsov et al., 2020).

With ``Z_1..Z_N`` the critics, each giving ``M`` atoms ``Z_n(s, a)_m`` of the return distribution
at fractions ``tau_m = (2m + 1) / 2M``, ``Z'`` their Polyak-averaged targets, ``pi`` the
tanh-squashed Gaussian actor and temperature ``alpha``, one gradient step on a batch is::

    a' ~ pi(.|s'),  pool = sort(all N * M atoms Z'_n(s', a')_m)                     (target_value)
    keep = the smallest k = N * (M - d) atoms of pool        (truncation: drops the top d * N)
    y_j  = sum_{i<h} gamma^i r_{t+i} + gamma^h (1 - terminated) (keep_j - alpha log pi(a'|s'))
    L_Z  = mean_n mean_{m, j} rho^kappa_{tau_m}(y_j - Z_n(s, a)_m)  (quantile Huber, per critic)
    L_pi = mean(alpha * log pi(a~|s) - mean_{n, m} Z_n(s, a~)_m),   a~ ~ pi(.|s), reparameterised
    L_a  = -mean(log_alpha * (log pi(a~|s) + target_entropy))       (auto_alpha)

then every target critic moves ``tau`` towards its critic. The actor reads the mean of every
atom (no truncation), as in the paper.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo import (
    EntropyTemperature,
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    quantile_huber_loss,
    quantile_midpoints,
)
from rlblocks.algo.nets import EnsembleMLP, ModuleEnsemble
from rlblocks.contracts import Batch, Buffer
from rlblocks_algo_tqc.config import TQCConfig


class QuantileCritics(nn.Module):
    """``N`` critics over one encoder: ``forward(obs, act)`` gives ``[N, B, M]`` atoms."""

    def __init__(self, encoder: nn.Module, net: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net

    def forward(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.encoder(obs), act], dim=-1))


def truncated_target_atoms(atoms: torch.Tensor, drop_per_critic: int) -> torch.Tensor:
    """The pooled, sorted and truncated target atoms ``[B, N * (M - d)]`` of the target
    critics' atoms ``[N, B, M]``: every critic's atoms together, the largest ``d * N`` dropped."""
    n, b, m = atoms.shape
    pooled = atoms.permute(1, 0, 2).reshape(b, n * m)
    kept = n * (m - drop_per_critic)
    return torch.sort(pooled, dim=1).values[:, :kept]


class TQCPolicy(OffPolicyPolicy):
    """TQC for Box actions (see :class:`TQCConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: TQCConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or TQCConfig()
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
                f"TQC needs a Box action space, got {action_space}; for Discrete actions use "
                "discrete-sac or qrdqn"
            )
        c = self.config = config
        self.actor = self.squashed_gaussian_actor((c.log_std_min, c.log_std_max))
        self.critic = self._quantile_critics()
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy if c.target_entropy is not None else -self.act_dim,
            tune=c.auto_alpha,
        )
        self.register_buffer("taus", quantile_midpoints(c.n_quantiles), persistent=False)
        self.to(self.device)
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )
        self.temperature.attach(self, c.alpha_lr)

    def _quantile_critics(self) -> QuantileCritics:
        """The user's critic heads (``[features, action] -> [B, M]``), else ``N`` MLPs of
        ``hidden_sizes_of("critic")`` evaluated as one ensemble."""
        c = self.config
        encoder = self.make_encoder()
        in_dim = int(encoder.out_dim) + self.act_dim
        heads = self.critic_heads(
            c.n_critics, in_dim, c.n_quantiles,
            f"{c.n_quantiles} atoms of Z(s, a) of the features and the action concatenated",
        )  # fmt: skip
        net: nn.Module
        if heads is not None:
            net = ModuleEnsemble(heads)
        else:
            net = EnsembleMLP(
                c.n_critics, in_dim, self.hidden_sizes_of("critic"), c.n_quantiles, c.activation
            )
        return QuantileCritics(encoder, net)

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
        """The truncated soft target atoms ``[B, N * (M - d)]`` of next observations."""
        act_next, logp_next = self.actor(obs_next)
        atoms = truncated_target_atoms(
            self.critic_target(obs_next, act_next), self.config.drop_per_critic
        )
        return atoms - self.alpha * logp_next.unsqueeze(1)

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """``batch.returns``: the n-step target atoms ``[B, N * (M - d)]``."""
        partial, discount, obs_next = self.target_parts(batch, buffer, indices)
        with torch.no_grad():
            atoms = self.target_value(self.obs_tensor(obs_next))
        batch.returns = (
            self.as_tensor(partial).unsqueeze(1) + self.as_tensor(discount).unsqueeze(1) * atoms
        )
        return batch

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        target = batch.returns  # [B, K]
        weight = self.weights(batch)

        # critics: every critic's M atoms regress on all K kept target atoms
        atoms = self.critic(obs, act)  # [N, B, M]
        n, b, m = atoms.shape
        per_row = (
            quantile_huber_loss(
                atoms.reshape(n * b, m),
                target.unsqueeze(0).expand(n, *target.shape).reshape(n * b, -1),
                self.taus,
                kappa=c.kappa,
            ).view(n, b)
            / m
        )  # mean over atoms and target atoms, as in the paper
        if weight is not None:
            per_row = per_row * weight
        critic_loss = per_row.mean()
        self.critic_step.step(critic_loss)

        # actor: maximise the mean of all atoms + alpha * entropy
        with self.critic_step.frozen():
            act_new, logp = self.actor(obs)
            q_new = self.critic(obs, act_new).mean(dim=(0, 2))
            actor_loss = (self.alpha * logp - q_new).mean()
            self.actor_step.step(actor_loss)

        stats: dict[str, Any] = {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q": q_new.detach().mean(),
            "entropy": -logp.detach().mean(),
        }
        if self.temperature.tune:
            self.temperature.update(-logp.detach())
            stats["alpha"] = self.alpha

        self.critic_target.update()
        self.gradient_steps += 1
        batch.td_error = (target.mean(dim=1) - atoms.detach().mean(dim=(0, 2))).abs()
        return stats
