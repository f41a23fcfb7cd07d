"""BDQ: Q-learning over a continuous Box action space discretised per dimension, with one
network branch per dimension (Tavakoli, Pardo and Kormushev, 2018, "Action Branching
Architectures for Deep Reinforcement Learning").

Each of the ``D`` action dimensions gets ``bins`` values evenly spaced from the Box's low to its
high. A flat Q-network would need ``bins ** D`` outputs; BDQ keeps ``D * bins``: a shared trunk,
a state-value head ``V(s)`` and one advantage head per dimension, combined per branch as::

    Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean_a A_d(s, a)        (dueling; off: Q_d = head_d)

The policy's action is the index vector ``[D]`` (int64) of the per-branch argmaxes;
:meth:`BDQPolicy.map_action` turns indices into env values and
:meth:`BDQPolicy.map_action_inverse` a continuous env action (the collector's random warm-up)
into the nearest indices. Target, the paper's "mean operator" (one scalar per sample, so core's
:meth:`~rlblocks.algo.OffPolicyPolicy.process_fn` builds it with n-step rewards)::

    y   = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) (1/D) sum_d Q_d^-(s', a*_d)
    a*_d = argmax_a Q_d(s', a)   (online network with double, else the target network)

Loss: the mean over branches of the Huber (or squared) error between ``Q_d(s, a_d)`` and ``y``,
weighted by a prioritized sampler's importance weights; the per-sample TD error a prioritized
buffer takes is the mean absolute error over branches.

The paper also scales the trunk's gradient by ``1 / (D + 1)``; with Adam that is a constant
factor on every trunk parameter's gradient, which Adam's normalisation cancels (up to its
epsilon and the gradient clipping), so it is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import QLearningPolicy, epsilon_greedy, value_network
from rlblocks.algo.nets import NetworkPart, noisy_mlp
from rlblocks.contracts import Batch
from rlblocks_algo_bdq.config import BDQConfig

__all__ = ["BDQPolicy", "BranchingQNetwork"]


class BranchingQNetwork(nn.Module):
    """``obs -> Q [B, D, bins]``: a shared trunk (the encoder, then ``hidden``), a state-value
    head and one advantage head per action dimension (each ``head_hidden`` wide). With
    ``dueling=False`` there is no value head and each branch head gives its Q-values directly;
    with ``noisy`` every linear layer is a :class:`~rlblocks.algo.nets.NoisyLinear`."""

    def __init__(
        self,
        in_dim: int,
        num_branches: int,
        bins: int,
        hidden: Sequence[int] = (64, 64),
        head_hidden: Sequence[int] = (64,),
        dueling: bool = True,
        noisy: bool = False,
        sigma0: float = 0.5,
        activation: str = "relu",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.num_branches, self.bins, self.dueling = int(num_branches), int(bins), dueling
        kw: dict[str, Any] = {"activation": activation, "noisy": noisy, "sigma0": sigma0}
        self.trunk = noisy_mlp(in_dim, list(hidden), **kw)
        width = self.trunk.out_dim  # type: ignore[attr-defined]
        # the trunk ends in an activation, so every head starts from the shared features
        self.value = noisy_mlp(width, list(head_hidden), 1, **kw) if dueling else None
        self.branches = nn.ModuleList(
            noisy_mlp(width, list(head_hidden), self.bins, **kw) for _ in range(self.num_branches)
        )

    def forward(self, obs: Any) -> torch.Tensor:
        """Observation tensors (raw with an encoder, else ``[B, in_dim]``) ``-> [B, D, bins]``."""
        x = self.encoder(obs) if self.encoder is not None else obs.flatten(1)
        h = self.trunk(x)
        heads = torch.stack([branch(h) for branch in self.branches], dim=1)
        if self.value is None:
            return heads
        value = self.value(h).unsqueeze(1)  # [B, 1, 1]
        return value + heads - heads.mean(dim=2, keepdim=True)


class BDQPolicy(QLearningPolicy):
    """BDQ over a bounded Box action space. ``model`` defaults to a :class:`BranchingQNetwork`
    over the default observation encoder; a custom one takes the observation tensors and
    returns ``[B, D, bins]`` with ``D`` the number of action dimensions."""

    #: random warm-up actions are snapped to the bins before the env runs them
    quantized_actions = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BDQConfig | None = None,
        device: str | torch.device = "cpu",
        model: NetworkPart | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or BDQConfig()
        given = {"encoder": encoder, "model": model}
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(
                f"BDQ needs a Box action space (discretised per dimension), got {action_space}; "
                "for Discrete actions use dqn"
            )
        low = np.asarray(action_space.low, dtype=np.float64).ravel()
        high = np.asarray(action_space.high, dtype=np.float64).ravel()
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"BDQ discretises the action Box between its bounds, which must be finite; got "
                f"{action_space} (wrap the env to rescale its actions)"
            )
        branches = int(np.prod(action_space.shape))

        def branching(obs_encoder: nn.Module) -> nn.Module:
            return BranchingQNetwork(
                obs_encoder.out_dim, branches, int(c.bins), hidden=c.hidden_sizes,
                head_hidden=c.head_hidden_sizes, dueling=c.dueling, noisy=c.noisy,
                sigma0=c.noisy_sigma0, activation=c.activation, encoder=obs_encoder,
            )  # fmt: skip

        net = value_network(
            observation_space, action_space, branching, (branches, int(c.bins)),
            f"Q-values of {c.bins} bins for each of the {branches} action dimensions", c.images,
            encoder, model,
        )  # fmt: skip
        # map_action below replaces core's [-1, 1] scaling with the bin table
        super().__init__(observation_space, action_space, c, device, net, action_scaling=False)
        self.note_networks(**given)
        self.num_branches = branches
        self.bins = int(c.bins)
        self._act_shape = tuple(action_space.shape)
        #: env value of every (dimension, bin): ``[D, bins]``, exact low and high at the ends
        self.bin_values = np.linspace(low, high, self.bins, axis=1).astype(action_space.dtype)
        self._low, self._width = low, high - low
        self._dims = np.arange(self.num_branches)

    # -- actions ------------------------------------------------------------------------------
    def map_action(self, act: np.ndarray) -> np.ndarray:
        """Bin indices ``[..., D]`` to env actions ``[..., *action_shape]`` (indices outside
        ``0 .. bins-1`` are clipped)."""
        idx = np.clip(np.asarray(act, dtype=np.int64), 0, self.bins - 1)
        values = self.bin_values[self._dims, idx]
        return values.reshape(*values.shape[:-1], *self._act_shape)

    def map_action_inverse(self, act: np.ndarray) -> np.ndarray:
        """Env actions ``[..., *action_shape]`` to the nearest bin indices ``[..., D]`` (int64):
        how the collector's uniform random warm-up actions are stored."""
        arr = np.asarray(act, dtype=np.float64)
        lead = arr.shape[: arr.ndim - len(self._act_shape)]
        arr = arr.reshape(*lead, self.num_branches)
        # a dimension with low == high has one value: every index maps to it, take 0
        width = np.where(self._width > 0, self._width, 1.0)
        idx = np.rint((arr - self._low) / width * (self.bins - 1))
        return np.clip(idx, 0, self.bins - 1).astype(np.int64)

    # -- acting -------------------------------------------------------------------------------
    def q_values(self, obs: Any, net: nn.Module) -> torch.Tensor:
        """Per-branch Q-values ``[B, D, bins]`` of observation tensors under ``net``."""
        return net(obs)

    def forward(
        self, batch: Batch, state: Any = None, model: str = "model", **kwargs: Any
    ) -> Batch:
        """Greedy per branch (``eps_test`` of the bins random in test mode):
        ``Batch(act=indices [B, D] int64, logits=q [B, D, bins])``."""
        net = self.target_model if model != "model" else self.model
        q = self.q_values(self.obs_tensor(batch.obs), net)
        act = q.detach().argmax(dim=2).cpu().numpy()
        out = Batch(act=act, logits=q, state=state)
        out.act = self.test_exploration(act, out)  # unchanged in training mode
        return out

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        """Each dimension of each action independently replaced by a uniformly random bin with
        probability epsilon (core's :func:`~rlblocks.algo.epsilon_greedy` on the
        flattened indices, drawing from the policy's own checkpointed generator)."""
        arr = np.asarray(act)
        flat = epsilon_greedy(arr.reshape(-1), self.epsilon, self.bins, 0, self._rng)
        return flat.reshape(arr.shape)

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """The mean over branches of the target network's value of each branch's bootstrap
        action: ``[B]``."""
        q_target = self.q_values(obs_next, self.target_model)
        if self.config.double and self.use_target:
            best = self.q_values(obs_next, self.model).argmax(dim=2, keepdim=True)
        else:
            best = q_target.argmax(dim=2, keepdim=True)
        return q_target.gather(2, best).squeeze(2).mean(dim=1)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        q = self.q_values(self.obs_tensor(batch.obs), self.model)
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)
        act = act.reshape(len(q), self.num_branches, 1)
        q_taken = q.gather(2, act).squeeze(2)  # [B, D]
        target = batch.returns.unsqueeze(1).expand_as(q_taken)
        td = q_taken - target
        if self.config.loss == "huber":
            per_branch = F.smooth_l1_loss(q_taken, target, reduction="none")
        else:
            per_branch = td.pow(2)
        per_sample = per_branch.mean(dim=1)
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = td.detach().abs().mean(dim=1)
        return {"loss": loss.detach(), "q": q_taken.detach().mean()}
