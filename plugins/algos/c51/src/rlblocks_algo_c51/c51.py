"""C51: distributional Q-learning over a fixed categorical support.

For each action the network gives logits over ``num_atoms`` atoms ``z_i`` evenly spaced on
``[v_min, v_max]``; ``Q(s, a) = sum_i p_i(s, a) z_i``. One gradient step::

    a*     = argmax_a Q(s', a)                  (online network with double, else target)
    target = project(partial + discount * z, p_target(s', a*))       (core's projection)
    loss   = -sum_i target_i log p_i(s, a)      (weighted by a prioritized sampler's weights)

``partial`` and ``discount`` are the n-step pieces from core (``discount = gamma^m``, 0 when
the episode terminated within the ``m`` steps). The per-sample cross-entropy is the TD error a
prioritized sampler takes (as Rainbow does).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo import ValueBasedPolicy, categorical_projection, value_network
from rlblocks.algo.nets import AtomQNetwork, NetworkPart
from rlblocks.contracts import Batch
from rlblocks_algo_c51.config import C51Config


class C51Policy(ValueBasedPolicy):
    """C51 over discrete actions. ``model`` defaults to an :class:`AtomQNetwork` over the
    observation encoder (``encoder``, yours or the default one); your own ``model`` takes
    observation tensors (or your encoder's features) and returns logits ``[B, A, num_atoms]``
    (see :func:`~rlblocks.algo.value_network`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: C51Config | None = None,
        device: str | torch.device = "cpu",
        model: NetworkPart | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or C51Config()
        given = {"encoder": encoder, "model": model}
        if isinstance(action_space, gym.spaces.Discrete):
            n, k = int(action_space.n), self.outputs_per_action(c)

            def atoms(obs_encoder: nn.Module) -> nn.Module:
                return AtomQNetwork(
                    obs_encoder.out_dim, n, k, hidden=c.hidden_sizes,
                    dueling=c.dueling, noisy=c.noisy, sigma0=c.noisy_sigma0,
                    activation=c.activation, encoder=obs_encoder,
                )  # fmt: skip

            model = value_network(
                observation_space, action_space, atoms, (n, k),
                f"{k} numbers for each of the {n} actions", c.images, encoder, model,
            )  # fmt: skip
        super().__init__(observation_space, action_space, c, device, model)  # type: ignore[arg-type]
        self.note_networks(**given)
        self.register_buffer(
            "support", torch.linspace(c.v_min, c.v_max, c.num_atoms, device=self.device)
        )

    @staticmethod
    def outputs_per_action(config: Any) -> int:
        """What the network returns per action: the logits of ``num_atoms`` atoms."""
        return int(config.num_atoms)

    def probs(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        """Return distributions ``[B, A, num_atoms]`` of observation tensors under ``net``."""
        return torch.softmax(net(obs), dim=2)

    def q_values(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        return (self.probs(obs, net) * self.support).sum(dim=2)

    def target_distribution(self, batch: Batch) -> torch.Tensor:
        """The projected n-step target distribution ``[B, num_atoms]``."""
        obs_boot = self.obs_tensor(batch.obs_boot)
        best = self.bootstrap_actions(obs_boot)
        with torch.no_grad():
            p_next = self.probs(obs_boot, self.target_model)
            p_best = p_next[torch.arange(len(best), device=self.device), best]
            return categorical_projection(p_best, batch.partial, batch.discount, self.support)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        target = self.target_distribution(batch)
        logits = self.model(self.obs_tensor(batch.obs))
        act = self.actions_tensor(batch)
        log_p = torch.log_softmax(logits[torch.arange(len(act), device=self.device), act], dim=1)
        per_sample = -(target * log_p).sum(dim=1)
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = per_sample.detach()
        q_taken = (log_p.detach().exp() * self.support).sum(dim=1)
        return {"loss": loss.detach(), "q": q_taken.mean()}
