"""FQF: distributional Q-learning with a fully parameterized quantile function.

An implicit quantile network (IQN's) gives the return distribution's quantile ``F^-1_tau(s, a)``
at any fraction ``tau``; a fraction proposal network places, per state, ``N`` ascending
fractions ``0 = tau_0 < tau_1 < ... < tau_N = 1`` and the quantiles are taken at their midpoints
``tau_hat_i = (tau_i + tau_{i+1}) / 2``. The proposal looks at the quantile network's state
features (detached) and has its own optimizer (``"fraction"``), so the quantile optimizer
(``"q"``) never moves it. One gradient step::

    Q(s, a)   = sum_i (tau_{i+1} - tau_i) F^-1_tau_hat_i(s, a)
    a*        = argmax_a Q(s', a)         (online network with double, else target)
    target    = partial + discount * F'^-1_tau'_hat_j(s', a*)      at the fractions the proposal
                with probability tau'_{j+1} - tau'_j               gives the target's features
    fraction  = core's fraction_loss (the 1-Wasserstein gradient on tau_1 .. tau_{N-1})
                - entropy_coeff * entropy of the fractions
    quantile  = quantile_huber(F^-1_tau_hat(s, a), target, tau_hat, kappa)  (tau_hat detached;
                target samples weighted by their probabilities, transitions by a prioritized
                sampler's weights)

``partial`` and ``discount`` are the n-step pieces from core (``discount = gamma^m``, 0 when
the episode terminated within the ``m`` steps). Acting is deterministic: no fraction is sampled.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import (
    OptimizerStep,
    ValueBasedPolicy,
    fraction_loss,
    masked_argmax,
    observation_mask,
    quantile_huber_loss,
)
from rlblocks.algo.nets import (
    FractionProposal,
    ImplicitQuantileNetwork,
    NetworkPart,
    build_part,
    encoder_part,
    make_encoder,
)
from rlblocks.contracts import Batch
from rlblocks_algo_fqf.config import FQFConfig


def at_actions(z: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    """The quantiles ``[B, K]`` of one action per row from ``z [B, K, A]`` and ``act [B]``."""
    index = act.view(-1, 1, 1).expand(-1, z.shape[1], 1)
    return z.gather(2, index).squeeze(2)


def expected_q(taus: torch.Tensor, z_hats: torch.Tensor) -> torch.Tensor:
    """``Q [B, A] = sum_i (tau_{i+1} - tau_i) z_hats[:, i]`` from fractions ``taus [B, N+1]``
    and the quantiles at their midpoints ``z_hats [B, N, A]``."""
    widths = (taus[:, 1:] - taus[:, :-1]).unsqueeze(2)
    return (widths * z_hats).sum(dim=1)


class FQFPolicy(ValueBasedPolicy):
    """FQF over discrete actions. ``model`` defaults to an :class:`ImplicitQuantileNetwork`
    over the default observation encoder; a custom one needs its ``features(obs) [B, H]``,
    ``quantiles(features, taus [B, K]) [B, K, A]`` and ``feature_dim`` (``H``). The
    :class:`FractionProposal` is :attr:`proposal`, a module of the policy beside the model (in
    the policy's ``state_dict``, not in the model's optimizer)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: FQFConfig | None = None,
        device: str | torch.device = "cpu",
        model: torch.nn.Module | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or FQFConfig()
        given = encoder
        if model is None and isinstance(action_space, gym.spaces.Discrete):
            if encoder is None:
                encoder = make_encoder(observation_space, images=c.images)
            else:
                built = build_part("encoder", encoder, observation_space, action_space)
                encoder = encoder_part(built, observation_space)
            model = ImplicitQuantileNetwork(
                encoder.out_dim, int(action_space.n), hidden=c.hidden_sizes,
                embedding_dim=c.embedding_dim, dueling=c.dueling, noisy=c.noisy,
                sigma0=c.noisy_sigma0, activation=c.activation, encoder=encoder,
            )  # fmt: skip
        super().__init__(observation_space, action_space, c, device, model)  # type: ignore[arg-type]
        self.note_networks(encoder=given)
        feature_dim = int(self.model.feature_dim)  # type: ignore[arg-type]
        self.proposal = FractionProposal(feature_dim, c.num_fractions).to(self.device)
        self.fraction_step = self.add_optimizer(
            "fraction",
            OptimizerStep(
                self.proposal, c.fraction_lr, optimizer=c.fraction_optimizer,
                max_grad_norm=c.max_grad_norm,
            ),
        )  # fmt: skip

    def fractions(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The proposal's ``(taus [B, N+1], tau_hats [B, N], entropy [B])`` for state
        features, detached so that the fraction loss never moves the quantile network."""
        return self.proposal(features.detach())

    def evaluate(
        self, obs: Any, net: torch.nn.Module
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Q [B, A], taus [B, N+1], quantiles at tau_hats [B, N, A])`` of observation tensors
        under ``net`` (the online or the target network) with the proposed fractions."""
        features = net.features(obs)
        taus, tau_hats, _ = self.fractions(features)
        z_hats = net.quantiles(features, tau_hats.detach())
        return expected_q(taus, z_hats), taus, z_hats

    def q_values(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        return self.evaluate(obs, net)[0]

    def target_distribution(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The n-step target staircase: values ``[B, N]``, ``partial + discount * F'^-1(s', a*)``
        at the midpoints of the fractions proposed for the target network's features, and their
        probabilities ``[B, N]`` (the fractions' widths)."""
        obs_boot = self.obs_tensor(batch.obs_boot)
        with torch.no_grad():
            q_next, taus, z_next = self.evaluate(obs_boot, self.target_model)
            if self.config.double and self.use_target:
                best = self.bootstrap_actions(obs_boot)
            else:
                best = masked_argmax(q_next, observation_mask(obs_boot) if self.masked else None)
            z_best = at_actions(z_next, best)
            values = batch.partial.unsqueeze(1) + batch.discount.unsqueeze(1) * z_best
            return values, taus[:, 1:] - taus[:, :-1]

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        act = self.actions_tensor(batch)
        features = self.model.features(self.obs_tensor(batch.obs))
        taus, tau_hats, entropy = self.fractions(features)
        tau_hats = tau_hats.detach()
        pred = at_actions(self.model.quantiles(features, tau_hats), act)  # [B, N]

        # the proposal's step: its gradient reaches the proposal alone (all else detached)
        with torch.no_grad():
            at_taus = at_actions(self.model.quantiles(features, taus[:, 1:-1]), act)
        per_fraction = fraction_loss(at_taus, pred.detach(), taus)
        frac_loss = (per_fraction - c.entropy_coeff * entropy).mean()
        self.fraction_step.step(frac_loss)

        # the quantile network's step at the (detached) proposed midpoints
        target, target_probs = self.target_distribution(batch)
        # target values weighed by their steps' widths (unequal, unlike QR-DQN's and IQN's)
        per_sample = quantile_huber_loss(
            pred, target, tau_hats, c.kappa, target_weights=target_probs
        )
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = per_sample.detach()
        return {
            "loss": loss.detach(),
            "fraction_loss": frac_loss.detach(),
            "entropy": entropy.detach().mean(),
            "q": (pred.detach() * (taus[:, 1:] - taus[:, :-1]).detach()).sum(1).mean(),
        }
