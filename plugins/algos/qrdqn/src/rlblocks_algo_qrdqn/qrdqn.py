"""QR-DQN: distributional Q-learning by quantile regression.

For each action the network gives ``num_quantiles`` values ``theta_i(s, a)``, estimates of the
return distribution's quantiles at the fixed fractions ``tau_i = (2i + 1) / 2N``;
``Q(s, a) = mean_i theta_i(s, a)``. One gradient step::

    a*     = argmax_a Q(s', a)                  (online network with double, else target)
    target = partial + discount * theta_target(s', a*)      (N samples of the target return)
    loss   = quantile_huber(theta(s, a), target, tau, kappa)  (weighted by a prioritized
                                                              sampler's weights)

``partial`` and ``discount`` are the n-step pieces from core (``discount = gamma^m``, 0 when
the episode terminated within the ``m`` steps). The per-sample loss is the TD error a
prioritized sampler takes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import (
    ValueBasedPolicy,
    quantile_huber_loss,
    quantile_midpoints,
    value_network,
)
from rlblocks.algo.nets import AtomQNetwork, NetworkPart
from rlblocks.contracts import Batch
from rlblocks_algo_qrdqn.config import QRDQNConfig


class QRDQNPolicy(ValueBasedPolicy):
    """QR-DQN over discrete actions. ``model`` defaults to an :class:`AtomQNetwork` over the
    observation encoder (``encoder``, yours or the default one); your own ``model`` takes
    observation tensors (or your encoder's features) and returns quantile values ``[B, A,
    num_quantiles]`` (see :func:`~rlblocks.algo.value_network`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: QRDQNConfig | None = None,
        device: str | torch.device = "cpu",
        model: NetworkPart | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or QRDQNConfig()
        given = {"encoder": encoder, "model": model}
        if isinstance(action_space, gym.spaces.Discrete):
            n, k = int(action_space.n), c.num_quantiles

            def quantiles(obs_encoder: nn.Module) -> nn.Module:
                return AtomQNetwork(
                    obs_encoder.out_dim, n, k, hidden=c.hidden_sizes,
                    dueling=c.dueling, noisy=c.noisy, sigma0=c.noisy_sigma0,
                    activation=c.activation, encoder=obs_encoder,
                )  # fmt: skip

            model = value_network(
                observation_space, action_space, quantiles, (n, k),
                f"{k} quantile values for each of the {n} actions", c.images, encoder, model,
            )  # fmt: skip
        super().__init__(observation_space, action_space, c, device, model)  # type: ignore[arg-type]
        self.note_networks(**given)
        self.register_buffer("taus", quantile_midpoints(c.num_quantiles, device=self.device))

    def quantiles(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        """Quantile values ``[B, A, num_quantiles]`` of observation tensors under ``net``."""
        return net(obs)

    def q_values(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        return self.quantiles(obs, net).mean(dim=2)

    def target_quantiles(self, batch: Batch) -> torch.Tensor:
        """The n-step target samples ``[B, num_quantiles]``: ``partial + discount *
        theta_target(s', a*)``."""
        obs_boot = self.obs_tensor(batch.obs_boot)
        best = self.bootstrap_actions(obs_boot)
        with torch.no_grad():
            z_next = self.quantiles(obs_boot, self.target_model)
            z_best = z_next[torch.arange(len(best), device=self.device), best]
            return batch.partial.unsqueeze(1) + batch.discount.unsqueeze(1) * z_best

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        target = self.target_quantiles(batch)
        act = self.actions_tensor(batch)
        z = self.quantiles(self.obs_tensor(batch.obs), self.model)
        pred = z[torch.arange(len(act), device=self.device), act]  # [B, N]
        per_sample = quantile_huber_loss(pred, target, self.taus, self.config.kappa)
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = per_sample.detach()
        return {"loss": loss.detach(), "q": pred.detach().mean()}
