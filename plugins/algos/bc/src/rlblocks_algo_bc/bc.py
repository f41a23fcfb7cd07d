"""Behaviour cloning: a policy fitted to a dataset's actions by supervised learning.

Offline, from a fixed dataset ``D = {(s, a)}`` (its rewards and next states are not read),
trained by :class:`rlblocks.trainers.OfflineTrainer`. One gradient step on a batch ``B``:

1. Observations are normalised with the dataset's per-feature mean and standard deviation,
   computed once from every observation of the buffer (as TD3+BC does)::

       s <- (s - mean_D(s)) / (std_D(s) + eps)

2. The policy's loss is the negative log-likelihood of the dataset's actions, in the form the
   action space asks for:

   * Box, ``loss="mse"``: a deterministic actor ``pi(s) = tanh(f(s))`` (actions in the policy's
     [-1, 1] units, as rlblocks buffers store them), ``L = mean_B mean_dims (pi(s) - a)^2``:
     the likelihood of a fixed-variance Gaussian, up to constants;
   * Box, ``loss="nll"``: a tanh-squashed Gaussian ``pi(.|s)`` with a state-dependent standard
     deviation, ``L = -mean_B log pi(a|s)`` (the dataset's actions on the bounds are read just
     inside them);
   * Discrete: logits ``f(s)`` over the actions, ``L = mean_B CE(f(s), a)``; MultiDiscrete: one
     set of logits per sub-action, the cross-entropies summed over sub-actions.

Acting takes the most likely action (``tanh(f(s))``, the Gaussian's mean, the argmax) when
testing; a policy in training mode samples from its distribution.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import (
    Categorical,
    DatasetObsNorm,
    MultiCategorical,
    OffPolicyPolicy,
    OptimizerStep,
    observation_mask,
)
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch, Buffer, has_action_mask
from rlblocks_algo_bc.config import BCConfig


class Logits(nn.Module):
    """``f(s)``: the encoder, then a head to one logit per action (per sub-action's action,
    concatenated, for MultiDiscrete)."""

    def __init__(self, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, obs: Any) -> torch.Tensor:
        return self.head(self.encoder(obs))


class BCPolicy(DatasetObsNorm, OffPolicyPolicy):
    """Behaviour cloning for Box, Discrete and MultiDiscrete actions (see :class:`BCConfig`).

    ``encoder`` and ``actor`` are your own networks (modules or factories of the spaces): the
    encoder maps observations to features ``[B, D]``, the actor head maps features to one number
    per action dimension before the tanh (Box, ``mse``), the mean then the log std of each
    dimension (Box, ``nll``) or the logits (Discrete, MultiDiscrete)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BCConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or BCConfig()
        super().__init__(observation_space, action_space, config, device, **nets)
        c = self.config = config
        #: observations carry an action mask: sampled, greedy and cloned actions are legal ones
        self.masked = has_action_mask(observation_space)
        if isinstance(action_space, gym.spaces.Box):
            self.kind = "deterministic" if c.loss == "mse" else "gaussian"
        elif isinstance(action_space, gym.spaces.Discrete):
            self.kind = "categorical"
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self.kind = "multi"
            self.nvec = [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
        else:
            raise TypeError(
                "behaviour cloning needs Box, Discrete or MultiDiscrete actions, got "
                f"{action_space}"
            )
        self.actor: nn.Module
        if self.kind == "deterministic":
            self.actor = self.deterministic_actor()
        elif self.kind == "gaussian":
            self.actor = self.squashed_gaussian_actor((c.log_std_min, c.log_std_max))
        else:
            self.actor = self._logits()
        # 1. the dataset's statistics: s -> (s - obs_mean) * obs_scale, the identity until
        # fitted (at the first update, from the whole dataset)
        self.init_obs_norm(observation_space, c.obs_norm, c.obs_norm_eps, "behaviour cloning")
        self.to(self.device)
        self.optim_step = self.add_optimizer(
            "actor",
            OptimizerStep(
                self.actor, c.lr, max_grad_norm=c.max_grad_norm, weight_decay=c.weight_decay
            ),
        )

    def _logits(self) -> Logits:
        """The discrete policy's network: an encoder and a head to the logits (the user's
        actor, or an MLP of ``hidden_sizes``)."""
        encoder = self.make_encoder()
        space = self.action_space
        out = sum(self.nvec) if self.kind == "multi" else int(space.n)  # type: ignore[attr-defined]
        features = int(encoder.out_dim)
        head = self.actor_head(features, out, f"{out} logits")
        if head is None:
            head = MLP(
                features, self.hidden_sizes_of("actor"), out, activation=self.config.activation
            )
        return Logits(encoder, head)

    # -- 1. state normalisation: DatasetObsNorm's ---------------------------------------------
    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """One gradient step on ``sample_size`` transitions of ``buffer``, after fitting the
        normalisation statistics to it if none are fitted yet."""
        self.fit_obs_norm_once(buffer)
        return super().update(sample_size, buffer, **kwargs)

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """The most likely action when testing (``deterministic_eval``), a sample otherwise:
        ``[B, act_dim]`` in [-1, 1] for Box actions, ``[B]`` (``[B, n]`` MultiDiscrete)
        integers for discrete ones."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad():
            obs = self.normalize_obs(self.obs_tensor(batch.obs))
            if self.kind == "deterministic":
                act = self.actor(obs)
            elif self.kind == "gaussian":
                act, _ = self.actor(obs, deterministic=greedy, with_log_prob=False)
            else:
                legal = observation_mask(obs) if self.masked else None
                dist = self.distribution(self.actor(obs), legal)
                act = dist.mode() if greedy else dist.sample()
        return Batch(act=act.cpu().numpy(), state=state)

    def distribution(
        self, logits: torch.Tensor, legal: torch.Tensor | None = None
    ) -> Categorical | MultiCategorical:
        """The discrete policy's distribution over actions for ``logits``, over the legal
        actions of an action mask ``legal`` when there is one."""
        if self.kind == "multi":
            return MultiCategorical(logits, self.nvec, legal)
        return Categorical(logits, legal)

    # -- 2. the loss --------------------------------------------------------------------------
    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Nothing to prepare: cloning reads only the sampled observations and actions."""
        return batch

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.normalize_obs(self.obs_tensor(batch.obs))
        loss = self.loss(obs, batch.act)
        self.optim_step.step(loss)
        self.gradient_steps += 1
        return {"loss": loss.detach()}

    def loss(self, obs: Any, act: Any) -> torch.Tensor:
        """The cloning loss of the dataset's actions ``act`` at (normalised) ``obs``: mean
        squared error, the Gaussian's negative log-likelihood, or the cross-entropy."""
        if self.kind == "deterministic":
            return F.mse_loss(self.actor(obs), self.as_tensor(act))
        if self.kind == "gaussian":
            return -self.actor.log_prob(obs, self.as_tensor(act)).mean()
        logits = self.actor(obs)
        target = self.as_tensor(act, dtype=torch.long)
        if self.masked:  # the cross-entropy of the masked distribution
            dist = self.distribution(logits, observation_mask(obs))
            return -dist.log_prob(target.reshape(len(target), -1).squeeze(-1)).mean()
        if self.kind == "categorical":
            return F.cross_entropy(logits, target.reshape(-1))
        parts = torch.split(logits, self.nvec, dim=-1)
        return sum(F.cross_entropy(p, target[:, i]) for i, p in enumerate(parts))  # type: ignore[return-value]
