"""BCQ (Fujimoto, Meger & Precup, 2019, "Off-Policy Deep Reinforcement Learning without
Exploration"), for Box actions.

Offline RL from a fixed dataset ``D = {(s, a, r, s')}``, trained by
:class:`rlblocks.trainers.OfflineTrainer`. An actor-critic trained on ``D`` alone picks the
actions its critic overrates, and those are the actions ``D`` never tried (extrapolation
error). BCQ only ever considers actions close to ``D``'s: a generative model proposes actions
like the dataset's at a state, a small learned perturbation adjusts them, and the critic
chooses among them. This module follows the paper's Algorithm 1 in order. Actions are in the
policy's [-1, 1] units, as rlblocks buffers store them, so ``max_action`` is 1.

1. The generative model ``G_omega`` is a conditional VAE of the dataset's actions: an encoder
   ``E(s, a) = (mu, sigma)`` and a decoder ``D(s, z)``, trained on ``D``'s pairs::

       z ~ N(mu, sigma),   a~ = D(s, z) = tanh(...)
       L_VAE = mean (a - a~)^2  +  kl_weight * mean KL(N(mu, sigma) || N(0, I))

   Actions are generated from the prior, with the latent clipped to its likely region:
   ``a ~ G(s) = D(s, clip(z, -latent_clip, latent_clip))``, ``z ~ N(0, I)``.

2. The perturbation model ``xi_phi(s, a, Phi) = Phi tanh(...)`` moves a generated action by
   at most ``Phi`` per dimension; the action is ``clip(a + xi_phi(s, a, Phi), -1, 1)``.

3. The critics ``Q_1, Q_2`` learn from a target that generates ``n`` actions at ``s'``,
   perturbs them with the target perturbation model, scores each with the soft clipped double
   Q of the target critics and keeps the best::

       a_i = a~_i + xi'(s', a~_i, Phi),   a~_i ~ G(s'),   i = 1..n
       y   = r + gamma (1 - terminated) max_i [ lmbda min_j Q'_j(s', a_i)
                                                + (1 - lmbda) max_j Q'_j(s', a_i) ]
       L_Q = sum_j mean_B (Q_j(s, a) - y)^2

   ``lmbda`` = 1 is TD3's clipped double Q; below 1 it penalises uncertainty (the critics'
   disagreement) less harshly.

4. The perturbation model maximises ``Q_1`` of the perturbed generated action::

       L_xi = -mean_B Q_1(s, a~ + xi_phi(s, a~, Phi)),   a~ ~ G(s)

   and the target critics and target perturbation model move ``tau`` towards theirs.

5. Acting: ``pi(s) = argmax_{a_i} Q_1(s, a_i)`` over ``n`` perturbed generated actions. Tests
   (``deterministic_eval``) use one fixed set of ``n`` latents, drawn once and saved with the
   weights, so a test is a function of the state.

One difference of order from Algorithm 1: rlblocks computes the target (3.) when it prepares
the sampled batch, before the step's VAE update (1.), so the target's actions come from the
VAE as it was one Adam step earlier. What the target computes is the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch
from rlblocks_algo_bcq.config import BCQConfig

#: the VAE encoder's log standard deviation is clamped to this range (the authors' code)
LOG_STD_BOUNDS = (-4.0, 15.0)


def soft_clipped_double_q(q: torch.Tensor, lmbda: float) -> torch.Tensor:
    """``lmbda min_j Q_j + (1 - lmbda) max_j Q_j`` over the critics (dim 0 of ``q``,
    ``[2, ...]``): the paper's soft clipped double-Q estimate."""
    low, high = torch.aminmax(q, dim=0)
    return lmbda * low + (1.0 - lmbda) * high


class ActionVAE(nn.Module):
    """The generative model ``G_omega``: a conditional VAE of actions given observations.

    One observation encoder feeds both halves: the VAE encoder reads ``[features(s), a]`` and
    gives the latent's mean and log standard deviation, the decoder reads ``[features(s), z]``
    and gives an action in [-1, 1] (``tanh``)."""

    def __init__(
        self,
        encoder: nn.Module,
        act_dim: int,
        latent_dim: int,
        hidden: Sequence[int],
        activation: str = "relu",
        latent_clip: float = 0.5,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.latent_dim = latent_dim
        self.latent_clip = latent_clip
        features = int(encoder.out_dim)
        self.encode_net = MLP(features + act_dim, hidden, 2 * latent_dim, activation=activation)
        self.decode_net = MLP(features + latent_dim, hidden, act_dim, activation=activation)

    def forward(
        self, obs: Any, act: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(a~, mu, log_sigma)``: the reconstruction of ``act`` through a latent sampled
        (reparameterised) from the encoder's ``N(mu, sigma)``."""
        features = self.encoder(obs)
        mean, log_std = self.encode_net(torch.cat([features, act], dim=-1)).chunk(2, dim=-1)
        log_std = log_std.clamp(*LOG_STD_BOUNDS)
        z = mean + log_std.exp() * torch.randn_like(mean)
        return self._decode(features, z), mean, log_std

    def decode(self, obs: Any, z: torch.Tensor | None = None) -> torch.Tensor:
        """Generated actions ``[B, act_dim]``: ``D(s, z)`` with ``z`` given, else drawn from
        ``N(0, I)`` clipped to ``[-latent_clip, latent_clip]``."""
        features = self.encoder(obs)
        if z is None:
            z = self.sample_latents(features.shape[0], features.device)
        return self._decode(features, z)

    def sample_latents(self, rows: int, device: torch.device | str) -> torch.Tensor:
        """``rows`` latents from the clipped prior, ``[rows, latent_dim]``."""
        z = torch.randn(rows, self.latent_dim, device=device)
        return z.clamp(-self.latent_clip, self.latent_clip)

    def _decode(self, features: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.decode_net(torch.cat([features, z], dim=-1)))


class Perturbation(nn.Module):
    """The perturbation model ``xi_phi(s, a, Phi) = Phi tanh(net([features(s), a]))``;
    calling it returns the perturbed action ``clip(a + xi, -1, 1)``. ``net`` replaces the
    MLP by your own head from ``[features, action]`` to ``[B, act_dim]`` (before the tanh)."""

    def __init__(
        self,
        encoder: nn.Module,
        act_dim: int,
        phi: float,
        hidden: Sequence[int],
        activation: str = "relu",
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.phi = float(phi)
        in_dim = int(encoder.out_dim) + act_dim
        self.net = net if net is not None else MLP(in_dim, hidden, act_dim, activation=activation)

    def xi(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        """The perturbation itself, each entry in ``[-phi, phi]``."""
        return self.phi * torch.tanh(self.net(torch.cat([self.encoder(obs), act], dim=-1)))

    def forward(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        return (act + self.xi(obs, act)).clamp(-1.0, 1.0)


class BCQPolicy(OffPolicyPolicy):
    """BCQ for Box observations and actions (see :class:`BCQConfig`)."""

    eval_latents: torch.Tensor

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BCQConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or BCQConfig()
        super().__init__(
            observation_space, action_space, config, device,
            action_bound_method=config.action_bound_method, **nets,
        )  # fmt: skip
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(
                f"BCQ needs a Box action space, got {action_space}; for Discrete actions use "
                "discrete-bcq"
            )
        c = self.config = config
        latent_dim = c.latent_dim if c.latent_dim is not None else 2 * self.act_dim
        # 1. the generative model
        self.vae = ActionVAE(
            self.make_encoder(), self.act_dim, latent_dim, c.vae_hidden_sizes, c.activation,
            c.latent_clip,
        )  # fmt: skip
        # 2. the perturbation model (the user's actor head reads [features, action])
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim) + self.act_dim, self.act_dim,
            "one number per action dimension from the features and the action concatenated, "
            "before a tanh",
        )  # fmt: skip
        self.actor = Perturbation(
            encoder, self.act_dim, c.phi, self.hidden_sizes_of("actor"), c.activation, net=head
        )
        # 3. the twin critics, and the targets of both
        self.critic = self.q_ensemble(n=2)
        self.actor_target = TargetNetwork(self.actor, tau=c.tau)
        self.critic_target = TargetNetwork(self.critic, tau=c.tau)
        # 5. the latents of deterministic tests: n draws of the clipped prior, kept
        self.register_buffer("eval_latents", self.vae.sample_latents(c.num_sampled_actions, "cpu"))
        self.to(self.device)
        self.vae_step = self.add_optimizer(
            "vae", OptimizerStep(self.vae, c.vae_lr, max_grad_norm=c.max_grad_norm)
        )
        self.actor_step = self.add_optimizer(
            "actor", OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm)
        )
        self.critic_step = self.add_optimizer(
            "critic", OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm)
        )

    # -- 5. acting ------------------------------------------------------------------------------
    def candidate_actions(
        self, obs: torch.Tensor, actor: nn.Module, z: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` perturbed generated actions per state, ``[B * n, act_dim]`` (the rows of state
        ``b`` are ``b * n .. b * n + n - 1``), and the states repeated to match, with ``actor``
        (the perturbation model or its target) and the latents ``z`` (``[B * n,
        latent_dim]``; None: fresh draws)."""
        n = self.config.num_sampled_actions
        repeated = obs.repeat_interleave(n, dim=0)
        return actor(repeated, self.vae.decode(repeated, z)), repeated

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """``argmax_i Q_1(s, a_i)`` over ``n`` perturbed generated actions: ``[B, act_dim]`` in
        [-1, 1]."""
        n = self.config.num_sampled_actions
        with torch.no_grad():
            obs = self.obs_tensor(batch.obs)
            rows = obs.shape[0]
            z = None
            if not self.training and self.config.deterministic_eval:
                z = self.eval_latents.repeat(rows, 1)
            actions, repeated = self.candidate_actions(obs, self.actor, z)
            q1 = self.critic(repeated, actions, member=0).view(rows, n)
            best = q1.argmax(dim=1)
            act = actions.view(rows, n, -1)[torch.arange(rows, device=best.device), best]
        return Batch(act=act.cpu().numpy(), state=state)

    # -- 3. the critics' target -----------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``max_i [lmbda min_j Q'_j(s', a_i) + (1 - lmbda) max_j Q'_j(s', a_i)]`` over ``n``
        actions generated at ``s'`` and perturbed by the target perturbation model."""
        n = self.config.num_sampled_actions
        actions, repeated = self.candidate_actions(obs_next, self.actor_target)
        q = soft_clipped_double_q(self.critic_target(repeated, actions), self.config.lmbda)
        return q.view(-1, n).max(dim=1).values

    # -- the gradient step ----------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        weight = self.weights(batch)

        # 1. the VAE: reconstruction plus the KL term to the unit Gaussian
        recon, mean, log_std = self.vae(obs, act)
        recon_loss = F.mse_loss(recon, act)
        kl = 0.5 * (mean.pow(2) + (2.0 * log_std).exp() - 1.0 - 2.0 * log_std).mean()
        vae_loss = recon_loss + c.kl_weight * kl
        self.vae_step.step(vae_loss)

        # 3. the critics, on the target y that process_fn put in batch.returns
        q_data = self.critic(obs, act)  # [2, B]
        td = q_data - batch.returns
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)

        # 4. the perturbation model, on Q_1 of the perturbed generated actions
        with torch.no_grad():
            generated = self.vae.decode(obs)
        with self.critic_step.frozen():  # the actor's step needs no critic gradients
            actor_loss = -self.critic(obs, self.actor(obs, generated), member=0).mean()
            self.actor_step.step(actor_loss)
        self.critic_target.update()
        self.actor_target.update()
        self.gradient_steps += 1

        batch.td_error = td.detach().abs().mean(dim=0)
        return {
            "loss/vae": vae_loss.detach(),
            "loss/recon": recon_loss.detach(),
            "loss/kl": kl.detach(),
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "q/data": q_data.detach().mean(),
        }
