"""IQN: distributional Q-learning with implicit quantile networks.

The network maps a state and a fraction ``tau`` in (0, 1) to the return distribution's quantile
``Z_tau(s, a)`` for every action, so any number of quantiles can be asked for. Fractions are
drawn uniformly from torch's global generator (on the policy's device). One gradient step::

    a*     = argmax_a mean_k Z_tau_k(s', a)     K fractions (online network with double, else
                                                target)
    target = partial + discount * Z'_tau'_j(s', a*)    j < N', from the target network
    loss   = quantile_huber(Z_tau_i(s, a), target, tau_i, kappa)    i < N (weighted by a
                                                                    prioritized sampler's weights)

``partial`` and ``discount`` are the n-step pieces from core (``discount = gamma^m``, 0 when
the episode terminated within the ``m`` steps). Acting while training averages ``K`` sampled
quantiles; acting while testing averages the quantiles at the ``K`` evenly spaced midpoints
``(2k + 1) / 2K`` instead, so a test (and a restored checkpoint) acts deterministically.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import ValueBasedPolicy, quantile_huber_loss, quantile_midpoints
from rlblocks.algo.nets import (
    ImplicitQuantileNetwork,
    NetworkPart,
    build_part,
    check_output,
    encoder_part,
    make_encoder,
    sample_observations,
)
from rlblocks.contracts import Batch
from rlblocks_algo_iqn.config import IQNConfig


def at_actions(z: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
    """The quantiles ``[B, K]`` of one action per row from ``z [B, K, A]`` and ``act [B]``."""
    index = act.view(-1, 1, 1).expand(-1, z.shape[1], 1)
    return z.gather(2, index).squeeze(2)


def quantile_model(
    given: NetworkPart, observation_space: gym.Space, action_space: gym.Space
) -> torch.nn.Module:
    """A user's quantile network, built from a factory if need be and checked once on a sample
    batch: ``model(obs, taus [B, K])`` must return ``[B, K, A]``; a module answering
    ``(values, state)`` is wrapped to return the values."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(f"IQN needs a Discrete action space, got {action_space}")
    built = build_part("model", given, observation_space, action_space)
    sample = sample_observations(observation_space)
    leaf = sample
    while isinstance(leaf, dict):  # Dict and Tuple observations come as dicts of tensors
        leaf = next(iter(leaf.values()))
    rows = int(leaf.shape[0])
    k, n = 3, int(action_space.n)
    taus = torch.rand(rows, k, generator=torch.Generator().manual_seed(0))
    module, _ = check_output(
        "model", built, [sample, taus], [(k, n)],
        f"quantile values [B, K, {n}] for fractions taus [B, K]",
    )  # fmt: skip
    return module


class IQNPolicy(ValueBasedPolicy):
    """IQN over discrete actions. ``model`` defaults to an :class:`ImplicitQuantileNetwork` over
    the default observation encoder (or your ``encoder``); your own ``model`` (a module or a
    factory given the spaces) is called as ``model(obs, taus [B, K])`` and returns quantile
    values ``[B, K, A]`` (or ``(values, state)``), checked on a sample batch when the policy is
    built."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: IQNConfig | None = None,
        device: str | torch.device = "cpu",
        model: NetworkPart | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or IQNConfig()
        given_encoder, given_model = encoder, model
        if model is not None:
            model = quantile_model(model, observation_space, action_space)
        elif isinstance(action_space, gym.spaces.Discrete):
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
        self.note_networks(encoder=given_encoder, model=given_model)
        self.register_buffer(
            "test_taus", quantile_midpoints(c.num_quantile_samples, device=self.device)
        )

    def sample_taus(self, batch_size: int, num: int) -> torch.Tensor:
        """``[batch_size, num]`` fractions drawn uniformly from [0, 1) by torch's global
        generator on the policy's device."""
        return torch.rand(batch_size, num, device=self.device)

    def acting_taus(self, batch_size: int) -> torch.Tensor:
        """The ``K`` fractions ``[batch_size, K]`` that value actions: sampled while training,
        the evenly spaced midpoints while testing."""
        if self.training:
            return self.sample_taus(batch_size, self.config.num_quantile_samples)
        return self.test_taus.expand(batch_size, -1)

    def q_values(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        z = net(obs, self.acting_taus(_batch_size(obs)))  # [B, K, A]
        return z.mean(dim=1)

    def target_quantiles(self, batch: Batch) -> torch.Tensor:
        """The n-step target samples ``[B, N']``: ``partial + discount * Z'_tau'(s', a*)`` at
        ``N'`` freshly sampled fractions."""
        obs_boot = self.obs_tensor(batch.obs_boot)
        best = self.bootstrap_actions(obs_boot)
        with torch.no_grad():
            taus = self.sample_taus(len(best), self.config.num_tau_prime_samples)
            z_best = at_actions(self.target_model(obs_boot, taus), best)
            return batch.partial.unsqueeze(1) + batch.discount.unsqueeze(1) * z_best

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        target = self.target_quantiles(batch)
        act = self.actions_tensor(batch)
        taus = self.sample_taus(len(act), c.num_tau_samples)
        pred = at_actions(self.model(self.obs_tensor(batch.obs), taus), act)  # [B, N]
        per_sample = quantile_huber_loss(pred, target, taus, c.kappa)
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = per_sample.detach()
        return {"loss": loss.detach(), "q": pred.detach().mean()}


def _batch_size(obs: Any) -> int:
    """Rows of an observation tensor, or of the first leaf of a dict or tuple of them."""
    while isinstance(obs, dict | list | tuple):
        obs = next(iter(obs.values())) if isinstance(obs, dict) else obs[0]
    return int(obs.shape[0])
