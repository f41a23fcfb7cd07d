"""DQN: Q-learning with a neural network, a replay buffer and a target network.

Target (n-step, partial-episode bootstrapping)::

    y_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) Q_target(s_{t+m}, a*)
    a*  = argmax_a Q_online(s_{t+m}, a)   if double else   argmax_a Q_target(s_{t+m}, a)

with m <= n_step cut at the episode's end. Loss: Huber or MSE between Q(s_t, a_t) and y_t.

Dict observations (goal-conditioned envs, nested Dicts too) are flattened leaf by leaf in sorted
key order by core's :class:`~rlblocks.nets.encoders.FlattenEncoder` into one float vector.
A buffer whose ``sample`` rewrites transitions (hindsight relabelling) offers
``batch_view(batch, indices)``; ``BasePolicy.update`` hands that view to ``process_fn``, so the
n-step walk sees the rewritten goals and rewards on every step of the path.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlblocks.batch import Batch
from rlblocks.nets import QNetwork, obs_dim
from rlblocks.nets.encoders import FlattenEncoder, obs_to_tensor
from rlblocks.policy import BasePolicy
from rlblocks.protocols import Buffer
from rlblocks.returns import nstep_return
from rlblocks_algo_dqn.config import DQNConfig

Path = tuple[str, ...]


def _dict_leaves(space: gym.spaces.Dict, prefix: Path = ()) -> list[tuple[Path, gym.Space]]:
    """``(key path, leaf space)`` of a (nested) Dict space, keys sorted at every level."""
    out: list[tuple[Path, gym.Space]] = []
    for key in sorted(space.spaces):
        sub = space.spaces[key]
        if isinstance(sub, gym.spaces.Dict):
            out.extend(_dict_leaves(sub, (*prefix, key)))
        else:
            out.append(((*prefix, key), sub))
    return out


def _dict_encoder(space: gym.spaces.Dict) -> tuple[list[Path], FlattenEncoder]:
    """The leaf paths of ``space`` and a FlattenEncoder over a one-level Dict of those leaves
    (an OrderedDict keeps the sorted path order; gymnasium would re-sort joined names)."""
    leaves = _dict_leaves(space)
    if not leaves:
        raise TypeError("DQN got a Dict observation space without any entries")
    flat = gym.spaces.Dict(OrderedDict(("/".join(p), s) for p, s in leaves))
    return [p for p, _ in leaves], FlattenEncoder(flat)


class DQNPolicy(BasePolicy):
    """DQN over discrete actions. ``model`` defaults to an MLP :class:`QNetwork`."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        device: str | torch.device = "cpu",
        model: torch.nn.Module | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, device=device)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"DQN needs a Discrete action space, got {action_space}; "
                "for continuous actions use an actor-critic algorithm"
            )
        self.config = config = config or DQNConfig()
        self.num_actions = int(action_space.n)
        self._discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        self._obs_paths: list[Path] = []
        if isinstance(observation_space, gym.spaces.Dict):
            self._obs_paths, self.encoder = _dict_encoder(observation_space)
            in_dim = self.encoder.out_dim
        else:
            in_dim = obs_dim(observation_space)
        self.model = model or QNetwork(
            in_dim,
            self.num_actions,
            hidden=config.hidden_sizes,
            dueling=config.dueling,
            activation=config.activation,
        )
        self.model.to(self.device)
        self.use_target = config.tau is not None or config.target_update_interval > 0
        self.target_model = copy.deepcopy(self.model) if self.use_target else self.model
        if self.use_target:
            self.target_model.requires_grad_(False)
            self.target_model.eval()
        # parameter lists are cached: walking the module tree every gradient step costs more
        # than the arithmetic of a small network
        self._params = list(self.model.parameters())
        self._target_params = list(self.target_model.parameters())
        self.optim = torch.optim.Adam(self._params, lr=config.lr, fused=True)
        self.gradient_steps = 0

    # -- acting -------------------------------------------------------------------------------
    def _obs(self, obs: Any) -> torch.Tensor:
        """Network input ``[B, in_dim]`` from ``obs [B, ...]`` (a dict/Batch for Dict spaces)."""
        if self._obs_paths:
            flat = {}
            for path in self._obs_paths:
                leaf = obs
                for key in path:
                    leaf = leaf[key]
                flat["/".join(path)] = obs_to_tensor(leaf, self.device)
            return self.encoder(flat)
        if self._discrete_obs:
            idx = torch.as_tensor(obs, dtype=torch.long, device=self.device)
            return F.one_hot(idx, self.observation_space.n).float()  # type: ignore[attr-defined]
        return self.as_tensor(obs)

    def forward(
        self, batch: Batch, state: Any = None, model: str = "model", **kwargs: Any
    ) -> Batch:
        """Greedy actions: ``Batch(act [B], logits=q [B, A])``."""
        net = self.model if model == "model" else self.target_model
        q = net(self._obs(batch.obs))
        act = q.argmax(dim=1).cpu().numpy()
        return Batch(act=act, logits=q, state=state)

    @property
    def epsilon(self) -> float:
        """Exploration rate for the current state: the schedule while collecting for training,
        ``eps_test`` while testing."""
        c = self.config
        if not self.training:
            return c.eps_test
        if c.eps_decay_steps == 0:
            return c.eps_end
        frac = min(1.0, self.env_step / c.eps_decay_steps)
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        eps = self.epsilon
        if eps <= 0.0:
            return act
        explore = self._rng.random(len(act)) < eps
        if explore.any():
            act = act.copy()
            act[explore] = self._rng.integers(self.num_actions, size=int(explore.sum()))
        return act

    # -- learning -----------------------------------------------------------------------------
    @torch.no_grad()
    def _target_q(self, obs_next: Any) -> torch.Tensor:
        obs_next = self._obs(obs_next)
        q_target = self.target_model(obs_next)
        if self.config.double and self.use_target:
            best = self.model(obs_next).argmax(dim=1, keepdim=True)
        else:
            best = q_target.argmax(dim=1, keepdim=True)
        return q_target.gather(1, best).squeeze(1)

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """n-step returns over the buffer: ``batch.returns`` is the TD target ``y_t``.

        ``buffer`` is a relabelled view when the buffer rewrites what it samples (hindsight
        relabelling; :meth:`BasePolicy.update` passes it), so targets read the rewritten rows."""
        partial, boot_idx, boot_discount = nstep_return(
            buffer, indices, self.config.gamma, self.config.n_step
        )
        obs_next = buffer.get(boot_idx, "obs_next") if hasattr(buffer, "get") else None
        if obs_next is None:
            obs_next = buffer[boot_idx].obs_next
        q_next = self._target_q(obs_next).cpu().numpy()
        batch.returns = (partial + boot_discount * q_next).astype(np.float32)
        return batch

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        q = self.model(self._obs(batch.obs))
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)
        q_taken = q.gather(1, act.view(-1, 1)).squeeze(1)
        target = self.as_tensor(batch.returns)
        td = q_taken - target
        weight = batch.get("weight", None)
        if self.config.loss == "huber":
            per_sample = F.smooth_l1_loss(q_taken, target, reduction="none")
        else:
            per_sample = td.pow(2)
        if weight is not None:
            per_sample = per_sample * self.as_tensor(weight)
        loss = per_sample.mean()
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._params, self.config.max_grad_norm, foreach=True)
        self.optim.step()
        self.gradient_steps += 1
        self._sync_target()
        batch.td_error = td.detach().abs().cpu().numpy()
        return {"loss": float(loss.detach()), "q": float(q_taken.detach().mean())}

    def _sync_target(self) -> None:
        if not self.use_target:
            return
        c = self.config
        if c.tau is not None:
            with torch.no_grad():
                torch._foreach_lerp_(self._target_params, self._params, c.tau)
        elif self.gradient_steps % c.target_update_interval == 0:
            self.target_model.load_state_dict(self.model.state_dict())

    # -- checkpoint ---------------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        state = super().extra_state()
        state.update(optim=self.optim.state_dict(), gradient_steps=self.gradient_steps)
        return state

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        super().load_extra_state(state)
        if "optim" in state:
            self.optim.load_state_dict(state["optim"])
        self.gradient_steps = int(state.get("gradient_steps", 0))
