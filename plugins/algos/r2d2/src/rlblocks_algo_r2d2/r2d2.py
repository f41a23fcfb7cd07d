"""R2D2: recurrent Q-learning from replayed windows (Kapturowski et al., 2019, "Recurrent
Experience Replay in Distributed Reinforcement Learning"), in one process.

How each part of the paper maps onto rlblocks:

* **Recurrent Q-network** (section 2: conv torso, LSTM, dueling head) —
  :class:`~rlblocks_algo_r2d2.network.RecurrentQNetwork`: core's observation encoder and an MLP
  torso, core's :class:`~rlblocks.algo.nets.RecurrentBody` (LSTM or GRU), a plain or dueling Q head.
* **Acting with epsilon-greedy, state carried across steps** — :meth:`R2D2Policy.forward` runs
  one ``step`` of the network per env from the state the collector carries (zeroed by the
  collector when an episode ends) and returns the new state; exploration is core's
  ``epsilon_greedy`` on a schedule (the paper gives each actor a fixed epsilon instead).
* **Stored state** (section 3, "stored state" strategy) — ``forward`` returns the state
  *entering* each step as ``policy.state``, which the collector stores with the step, so every
  replayed window starts from the state the actor had there.
* **Sequences with priorities** (section 2) — the ``prioritized-sequence`` buffer sampler
  (:mod:`rlblocks_algo_r2d2.sampler`): windows of ``burn_in + length`` steps drawn with
  probability proportional to priority**alpha, importance weights with exponent beta, each
  window's priority ``eta * max|td| + (1 - eta) * mean|td|`` over its learned steps (eta 0.9).
  The paper leaves importance weighting out; ``buffer.beta=0`` does the same here (the
  defaults keep a fixed beta of 0.6). Core's uniform ``sequence`` sampler works too.
* **Burn-in** (section 3) — the first ``burn_in`` steps of a window are run from the stored
  state without gradient, only to refresh the (possibly stale) state; the loss is on the rest.
  The online and the target network each run their own burn-in from the same stored state. A
  window that starts at its episode's first step needs none (its stored state is the zero
  start state); the sampler marks all of its steps as learned and they get gradient.
* **n-step double-Q targets inside the window** (section 2) — for each learned step ``t``::

      y_t = h( sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) h^-1(Q_target(s_{t+m}, a*)) )
      a*  = argmax_a Q_online(s_{t+m}, a)

  with ``m <= n_step`` cut where the window's real steps end. Both networks are unrolled over
  the window's observations followed by its last step's next observation, so the state
  ``s_{t+m}`` is the recurrent state after step ``t + m - 1`` even when that step ended the
  window (a truncated episode or the window's end bootstraps; a terminated one does not).
* **Value rescaling** (section 2, from Pohlen et al., 2018) — ``h(x) = sign(x)(sqrt(|x|+1)-1)
  + eps x`` and its closed-form inverse (:func:`rescale`, :func:`unrescale`); on by default,
  switchable with ``value_rescaling``.
* **Target network** — core's :class:`~rlblocks.algo.TargetNetwork`: hard copies every
  ``target_update_interval`` gradient steps as in the paper (``tau=None``), or Polyak
  averaging with ``tau`` (the default: a run of a few thousand updates, like the masked
  CartPole's, propagates values far too slowly with the paper's copy every 2500 updates).
* **Distributed actors and learner** — not here: one process collects and learns, which keeps
  runs exactly reproducible.

Loss: mean over the batch's learned steps of ``0.5 td^2`` (or Huber), each window weighted by
its importance weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import (
    QLearningPolicy,
    epsilon_greedy,
    linear_decay,
    masked_argmax,
    masked_epsilon_greedy,
    observation_mask,
)
from rlblocks.algo.nets import NetworkPart, build_part, encoder_part, make_encoder
from rlblocks.contracts import Batch, Buffer, has_action_mask
from rlblocks_algo_r2d2.config import R2D2Config
from rlblocks_algo_r2d2.network import RecurrentQNetwork
from rlblocks_algo_r2d2.sampler import window_priority

__all__ = ["R2D2Policy", "nstep_window_targets", "rescale", "unrescale"]


def rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """R2D2's value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def unrescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`rescale`:
    ``sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``."""
    root = torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps))
    return torch.sign(x) * (((root - 1.0) / (2.0 * eps)) ** 2 - 1.0)


def nstep_window_targets(
    boot_value: torch.Tensor,
    rew: torch.Tensor,
    terminated: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    n_step: int,
) -> torch.Tensor:
    """n-step targets ``[B, W]`` of every step of ``[B, W]`` windows, in the value space of
    ``boot_value``.

    ``boot_value [B, W + 1]``: column ``j`` is the bootstrap value of the state entering step
    ``j`` (column ``W``: after the last step). ``mask`` marks the real steps (a prefix of each
    row); sums stop where it ends, and ``terminated`` at the last summed step drops the
    bootstrap. Columns outside the mask hold meaningless values."""
    batch, width = rew.shape
    maskf = mask.to(rew.dtype)
    pad = rew.new_zeros(batch, n_step)
    rew_pad = torch.cat([rew * maskf, pad], dim=1)
    mask_pad = torch.cat([maskf, pad], dim=1)
    partial = torch.zeros_like(rew)
    count = torch.zeros_like(rew)
    for k in range(n_step):
        partial = partial + gamma**k * rew_pad[:, k : k + width]
        count = count + mask_pad[:, k : k + width]
    steps = count.long()  # m: real steps summed (>= 1 on real steps)
    cols = torch.arange(width, device=rew.device).expand(batch, width)
    boot_col = cols + steps
    last_col = (boot_col - 1).clamp(min=0)
    ended = terminated.gather(1, last_col).to(rew.dtype)
    discount = torch.pow(torch.full_like(rew, gamma), count) * (1.0 - ended)
    return partial + discount * boot_value.gather(1, boot_col)


class R2D2Policy(QLearningPolicy):
    """R2D2 over Discrete actions (see the module docstring). ``model`` defaults to a
    :class:`RecurrentQNetwork` over the default observation encoder, or over your ``encoder``
    (a module or a factory given the spaces, mapping observations to features ``[B, D]``,
    checked on a sample batch); a custom ``model`` must offer the same ``step``,
    ``sequence_features``, ``core`` and ``q_head``."""

    #: it learns from sampled windows, not rows of transitions (see BasePolicy.takes_intrinsic)
    takes_intrinsic = False

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: R2D2Config | None = None,
        device: str | torch.device = "cpu",
        model: nn.Module | None = None,
        encoder: NetworkPart | None = None,
    ) -> None:
        c = config or R2D2Config()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"R2D2 needs a Discrete action space, got {action_space}; for continuous "
                "actions use an actor-critic algorithm"
            )
        given = encoder
        if model is None:
            if encoder is None:
                encoder = make_encoder(observation_space, images=c.images)
            else:
                built = build_part("encoder", encoder, observation_space, action_space)
                encoder = encoder_part(built, observation_space)
            model = RecurrentQNetwork(
                encoder, int(action_space.n),
                torso=c.torso_sizes, hidden_size=c.rnn_hidden, cell=c.cell,
                num_layers=c.rnn_layers, head=c.hidden_sizes, dueling=c.dueling,
                activation=c.activation,
            )  # fmt: skip
        super().__init__(observation_space, action_space, c, device, model)
        self.note_networks(encoder=given)
        self.config: R2D2Config = c
        if c.lr_decay_steps:
            lr, steps = c.lr, c.lr_decay_steps
            self.optim_step.lr_schedule = lambda env_step: linear_decay(lr, env_step, steps)
        self.num_actions = int(action_space.n)
        self.masked = has_action_mask(observation_space)

    # -- acting -------------------------------------------------------------------------------
    def _state_in(self, state: Any, batch_size: int) -> dict[str, torch.Tensor]:
        """The state entering a step as tensors (None: the zero state of fresh episodes)."""
        core = self.model.core
        if state is None:
            return core.initial_state(batch_size, self.device)
        return {k: torch.as_tensor(state[k], dtype=torch.float32, device=self.device)
                for k in core.state_keys}  # fmt: skip

    def forward(
        self, batch: Batch, state: Any = None, model: str = "model", **kwargs: Any
    ) -> Batch:
        """Greedy actions of one step of every env (``eps_test`` of them random in test mode):
        ``Batch(act [B], logits=q [B, A], state=new state, policy=Batch(state=the state
        entering this step))``."""
        net = self.target_model if model != "model" else self.model
        obs = self.obs_tensor(batch.obs)
        entering = self._state_in(state, _rows(obs))
        q, new_state = net.step(obs, entering)
        legal = observation_mask(obs) if self.masked else None
        act = masked_argmax(q.detach(), legal).cpu().numpy()  # indices: map_action adds start
        # acting never backpropagates through time: the carried state holds no graph
        new_state = {k: v.detach() for k, v in new_state.items()}
        out = Batch(act=act, logits=q, state=new_state, policy=Batch(state=entering))
        if legal is not None:  # for exploration among the legal actions
            out.mask = legal
        out.act = self.test_exploration(act, out)  # unchanged in training mode
        return out

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        legal = batch.get("mask", None) if self.masked else None
        if legal is not None:
            return masked_epsilon_greedy(act, self.epsilon, legal, self._rng)
        return epsilon_greedy(act, self.epsilon, self.num_actions, 0, self._rng)

    # -- learning -----------------------------------------------------------------------------
    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Windows carry everything the update needs (targets are built inside them in
        :meth:`learn`). A buffer that samples single steps gives windows of one step each
        (from the stored state, no burn-in, one-step targets); sequence samplers give the
        real thing."""
        if np.ndim(indices) == 2:
            return batch
        windows = buffer[np.asarray(indices)[:, None]]  # [B, 1] reads of the same slots
        if "mask" not in windows:
            windows.mask = np.ones((len(indices), 1), dtype=bool)
        if "weight" in batch:
            windows.weight = batch.weight
        return windows

    def stored_start_state(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The state the actor had entering each window's first step (``[B, layers, H]``)."""
        stored = batch.get("policy", None)
        stored = None if stored is None else stored.get("state", None)
        if stored is None:
            raise ValueError(
                "the windows carry no stored recurrent state (policy.state): fill the buffer "
                "by acting with this policy (no random warm-up steps: trainer.warmup_steps=0)"
            )
        return {k: self.as_tensor(np.asarray(stored[k])[:, 0]) for k in self.model.core.state_keys}

    @staticmethod
    def window_observations(batch: Batch) -> Any:
        """``[B, W + 1]`` observations: each window's ``obs`` followed by its last step's
        ``obs_next``; as ``obs_next[t] = obs[t + 1]`` inside an episode, column ``j > 0`` is
        ``obs_next[j - 1]``, which also holds the bootstrap observation after the last real
        step of a window that ends early."""

        def join(obs: Any, obs_next: Any) -> Any:
            if isinstance(obs, Mapping) or hasattr(obs, "keys"):
                return {k: join(obs[k], obs_next[k]) for k in obs.keys()}  # noqa: SIM118
            return np.concatenate([np.asarray(obs)[:, :1], np.asarray(obs_next)], axis=1)

        return join(batch.obs, batch.obs_next)

    def unroll(
        self,
        net: nn.Module,
        obs: Any,
        state0: Mapping[str, torch.Tensor],
        burn_in: int = 0,
        full_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q-values ``[B, T, A]`` of ``net`` over observation tensors ``obs [B, T, ...]`` from
        ``state0``. The first ``burn_in`` steps run without gradient and the state leaving them
        is cut from the graph (R2D2's burn-in), except for the rows ``full_rows [B]`` marks,
        which get gradient over every step."""
        feats = net.sequence_features(obs)
        core = net.core
        if burn_in <= 0:
            y, _ = core.sequence(feats, state0)
            return net.q_head(y)
        if full_rows is None:
            full_rows = torch.zeros(feats.shape[0], dtype=torch.bool, device=feats.device)
        part = [torch.nonzero(~full_rows).flatten(), torch.nonzero(full_rows).flatten()]
        outs = []
        for rows, full in zip(part, (False, True), strict=True):
            if not len(rows):
                continue
            f = feats[rows]
            s0 = {k: v[rows] for k, v in state0.items()}
            if full:
                y, _ = core.sequence(f, s0)
            else:
                with torch.no_grad():
                    y_burn, s = core.sequence(f[:, :burn_in].detach(), s0)
                y_rest, _ = core.sequence(f[:, burn_in:], s)
                y = torch.cat([y_burn, y_rest], dim=1)
            outs.append((rows, y))
        if len(outs) == 1:
            y = outs[0][1]
        else:
            order = torch.cat([rows for rows, _ in outs])
            y = torch.cat([y for _, y in outs])[torch.argsort(order)]
        return net.q_head(y)

    @staticmethod
    def burn_in_of(learn_mask: np.ndarray) -> tuple[int, np.ndarray]:
        """``(burn_in, full_rows)`` of a batch: the steps before the first learned one in windows
        that do not learn their first step, and which windows learn from their first step."""
        full = learn_mask[:, 0].copy()
        rest = learn_mask[~full]
        learns = rest.any(axis=1)
        burn_in = int(rest[learns].argmax(axis=1).min()) if learns.any() else 0
        return burn_in, full

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        c = self.config
        mask_np = np.asarray(batch.mask, dtype=bool)
        learn_np = np.asarray(batch.get("learn_mask", mask_np), dtype=bool)
        burn_in, full_np = self.burn_in_of(learn_np)
        obs = self.obs_tensor(self.window_observations(batch))
        state0 = self.stored_start_state(batch)
        full_rows = torch.as_tensor(full_np, device=self.device)

        q_all = self.unroll(self.model, obs, state0, burn_in, full_rows)  # [B, W + 1, A]
        with torch.no_grad():
            q_target = self.unroll(self.target_model, obs, state0)
            greedy_net = q_all if c.double and self.use_target else q_target
            legal = observation_mask(obs) if self.masked else None  # [B, W + 1, A]
            best = masked_argmax(greedy_net.detach(), legal).unsqueeze(2)
            boot = q_target.gather(2, best).squeeze(2)  # [B, W + 1]
            if c.value_rescaling:
                boot = unrescale(boot, c.rescale_eps)
            mask = torch.as_tensor(mask_np, device=self.device)
            target = nstep_window_targets(
                boot, self.as_tensor(batch.rew), torch.as_tensor(
                    np.asarray(batch.terminated, dtype=bool), device=self.device),
                mask, c.gamma, c.n_step,
            )  # fmt: skip
            if c.value_rescaling:
                target = rescale(target, c.rescale_eps)

        act = torch.as_tensor(np.asarray(batch.act), dtype=torch.long, device=self.device)
        width = act.shape[1]
        q_taken = q_all[:, :width].gather(2, act.unsqueeze(2)).squeeze(2)  # [B, W]
        td = q_taken - target
        if c.loss == "huber":
            per_step = F.smooth_l1_loss(q_taken, target, reduction="none")
        else:
            per_step = 0.5 * td.pow(2)
        learn = torch.as_tensor(learn_np, device=self.device).to(per_step.dtype)
        weight = self.weights(batch)
        per_window = (per_step * learn).sum(dim=1)
        if weight is not None:
            per_window = per_window * weight
        steps = learn.sum()
        loss = per_window.sum() / steps.clamp(min=1.0)
        self.finish_step(loss)
        abs_td = td.detach().abs()
        batch.td_error = window_priority(abs_td, learn, c.priority_eta)
        learned_q = (q_taken.detach() * learn).sum() / steps.clamp(min=1.0)
        return {"loss": loss.detach(), "q": learned_q, "learned_steps": steps,
                "priority": batch.td_error.mean()}  # fmt: skip


def _rows(obs: Any) -> int:
    """Rows of an observation tensor (or of a nested dict of them)."""
    while isinstance(obs, Mapping):
        obs = next(iter(obs.values()))
    return int(obs.shape[0])
