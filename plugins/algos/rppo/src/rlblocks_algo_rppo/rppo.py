"""Recurrent PPO: PPO (Schulman et al., 2017) whose actor and critic each carry an LSTM (or GRU)
memory, for partially observed envs such as ``rlblocks/MaskedCartPole-v1``.

Networks. ``obs -> encoder (core's make_encoder) -> features``; the actor is ``features -> its
own recurrent layers -> Actor head -> distribution`` and the critic ``features -> its own
recurrent layers -> Critic head -> V``. Actor and critic do not share a memory, so the value loss
never moves what the policy remembers (the more stable choice; it costs a second recurrent step
per env step while collecting, none while testing).

Acting (``forward``). The collector carries the state per env (``actor_h``, ``actor_c``,
``critic_h``, ``critic_c``, each ``[B, layers, H]``; no ``*_c`` for a GRU) and zeroes an env's
rows when its episode ends. Each step stores the state *entering* it with the step in the buffer
(``policy.actor_h``, ...), and the log-probability of the action taken (``policy.logp``). Testing
takes the mode of the distribution and leaves the critic's state alone.

Preparing an update (``process_fn``), on a rollout of ``step_per_collect`` steps from N envs:

1. *Trajectories.* The steps are grouped by env, each env's in time order. A step continues the
   trajectory of the step before it when the buffer links them (same episode) or when the one
   before ended an episode and this one begins the next; it then *starts* an episode inside the
   trajectory, where the memory is zeroed as the collector zeroed it.
2. *Values and advantages.* The critic runs over each whole trajectory from the state stored with
   its first step (``RecurrentBody.sequence`` with the start mask), with the observation that
   follows each piece end (a truncated step, or the last step of the rollout, which goes on in the
   next collect) inserted after that step, so ``V(obs_next)`` there is read with the memory of the
   episode it belongs to. Values are recomputed rather than stored while acting, so that
   ``recompute_advantage`` and ``obs_norm`` (statistics updated before each update) work as in
   PPO. GAE with partial-episode bootstrapping (``rlblocks.algo.gae``) gives advantages and
   value targets.
3. *Windows.* Each trajectory is cut into consecutive windows of ``seq_len`` steps (the last one
   padded). A window starts from the state stored with its first step (the state acting had there)
   and carries across episode ends inside it through the start mask, so no step is spent on
   padding at episode ends. ``logp_old`` is recomputed over the windows before the first epoch: it
   equals the log-probability stored while acting up to float error.

Learning (``learn``): for each of ``repeat`` epochs, the windows in a random order, ``batch_size //
seq_len`` windows per minibatch; with ``ratio = pi(a|s, memory) / pi_old(a|s, memory)``::

    L_clip  = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))
    L_value = mean((V - R)^2)   or, with value_clip, the max of that and the clipped-value error
    loss    = L_clip + vf_coef * L_value - ent_coef * mean(entropy)

every mean over the real (unpadded) steps of the minibatch, with advantages standardised over
them (``norm_adv``). Gradients flow through the whole window (truncated backpropagation through
time from the stored state). An update stops early when the approximate KL
``mean((ratio - 1) - log ratio)`` exceeds ``1.5 * target_kl``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo import OnPolicyPolicy, gae, mask_distribution, observation_mask, value_loss
from rlblocks.algo.nets import RecurrentBody, obs_to_tensor
from rlblocks.contracts import Batch, Buffer, ViewRequirement, take_rows
from rlblocks_algo_rppo.config import RPPOConfig

__all__ = ["RPPOPolicy"]

#: the two memories, each with its own recurrent layers
_PARTS = ("actor", "critic")


class RPPOPolicy(OnPolicyPolicy):
    """Recurrent PPO for Discrete, MultiDiscrete and Box actions (see :class:`RPPOConfig`).

    Args:
        encoder, actor, critic: your own networks (modules or factories of the spaces; see
            :class:`~rlblocks.algo.OnPolicyPolicy`): the encoder maps observations to features,
            the actor and critic heads read the output of their memory
            (``[B, rnn_hidden_size]``).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: RPPOConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        c = config or RPPOConfig()
        super().__init__(observation_space, action_space, c, device, **nets)
        feat_dim = int(self.encoder.out_dim)
        size = c.rnn_hidden_size
        self.config: RPPOConfig
        #: width of the previous action and reward inputs (0 without them)
        self.prev_dim = 0
        if c.prev_action_reward:
            self.prev_dim = _action_width(action_space) + 1
            self.view_requirements["prev_act"] = ViewRequirement("act", shift=-1)
            self.view_requirements["prev_rew"] = ViewRequirement("rew", shift=-1)
        self.actor_rnn = RecurrentBody(feat_dim + self.prev_dim, size, c.cell, c.rnn_layers)
        self.critic_rnn = RecurrentBody(feat_dim + self.prev_dim, size, c.cell, c.rnn_layers)
        self.to(self.device)
        self.optim_step = self.add_optimizer("policy", self.make_optimizer_step(self, eps=1e-5))

    def actor_input_dim(self, feature_dim: int) -> int:
        return self.config.rnn_hidden_size

    def critic_input_dim(self, feature_dim: int) -> int:
        return self.config.rnn_hidden_size

    # -- state ----------------------------------------------------------------------------------
    @property
    def state_keys(self) -> tuple[str, ...]:
        """Keys of the recurrent state the collector carries (and the buffer stores)."""
        return tuple(f"{p}_{k}" for p in _PARTS for k in self.actor_rnn.state_keys)

    def initial_state(self, batch_size: int) -> dict[str, torch.Tensor]:
        """The zero state of ``batch_size`` fresh episodes."""
        out = {}
        for part in _PARTS:
            for key, value in self._rnn(part).initial_state(batch_size).items():
                out[f"{part}_{key}"] = value
        return out

    def _rnn(self, part: str) -> RecurrentBody:
        return self.actor_rnn if part == "actor" else self.critic_rnn

    def _part(self, state: Any, part: str) -> dict[str, torch.Tensor]:
        """One memory's state (``{"h": ..., "c": ...}``) out of the policy's full state (a dict
        or Batch of tensors or arrays, rows first)."""
        return {
            k: torch.as_tensor(state[f"{part}_{k}"], dtype=torch.float32, device=self.device)
            for k in self._rnn(part).state_keys
        }

    # -- acting ---------------------------------------------------------------------------------
    @torch.no_grad()  # learning replays windows; a carried state must not grow a graph
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Act on ``batch.obs [B, ...]`` from ``state`` (None: fresh episodes). Returns
        ``act``, the new ``state`` and ``policy``: the state entering this step and ``logp``."""
        obs = obs_to_tensor(batch.obs, self.device)
        mask = observation_mask(obs) if self.masked else None
        feats = self.encode(obs)
        if self.prev_dim:
            feats = torch.cat([feats, self._prev(batch.prev_act, batch.prev_rew)], dim=-1)
        if state is None:
            state = self.initial_state(feats.shape[0])
        actor_in = self._part(state, "actor")
        critic_in = self._part(state, "critic")
        y, actor_out = self.actor_rnn.step(feats, actor_in)
        dist = mask_distribution(self.actor(y), mask)  # legal actions only under a mask
        greedy = not self.training and self.config.deterministic_eval
        act = dist.mode() if greedy else dist.sample()
        if self.training:
            _, critic_out = self.critic_rnn.step(feats, critic_in)
        else:  # testing never reads the critic: its memory stays as it was
            critic_out = critic_in
        new_state: dict[str, torch.Tensor] = {}
        entering: dict[str, torch.Tensor] = {}
        for part, s_in, s_out in (
            ("actor", actor_in, actor_out),
            ("critic", critic_in, critic_out),
        ):
            for key in self._rnn(part).state_keys:
                entering[f"{part}_{key}"] = s_in[key]
                new_state[f"{part}_{key}"] = s_out[key]
        return Batch(
            act=act.detach().cpu().numpy(),
            state=new_state,
            policy=Batch(logp=dist.log_prob(act), **entering),
        )

    def _prev(self, act: Any, rew: Any) -> torch.Tensor:
        """The previous-action-and-reward input ``[B, prev_dim]``: the action one-hot (one per
        dimension for MultiDiscrete) or as is (Box), then the reward."""
        a = torch.as_tensor(np.asarray(act), device=self.device)
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            a_in = nn.functional.one_hot(a.long().flatten(), int(space.n))  # stored indices
        elif isinstance(space, gym.spaces.MultiDiscrete):
            nvec = [int(n) for n in np.asarray(space.nvec).flatten()]
            a_flat = a.long().reshape(len(a), -1)
            a_in = torch.cat(
                [nn.functional.one_hot(a_flat[:, i], n) for i, n in enumerate(nvec)], dim=-1
            )
        else:
            a_in = a.reshape(len(a), -1)
        r = torch.as_tensor(np.asarray(rew), dtype=torch.float32, device=self.device)
        return torch.cat([a_in.float(), r.reshape(-1, 1)], dim=-1)

    def _with_prev(self, feats: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        return feats if prev is None else torch.cat([feats, prev], dim=-1)

    # -- preparing an update --------------------------------------------------------------------
    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Group the rollout into trajectories, compute values, advantages and returns (GAE) and
        cut it into windows (see the module docstring); everything as tensors in ``batch``."""
        if self.obs_rms is not None and self.training:
            with torch.no_grad():
                self.obs_rms.update(self.encoder(obs_to_tensor(batch.obs, self.device)))
        c = self.config
        dev = self.device
        indices = np.asarray(indices, dtype=np.int64)
        order = np.argsort(np.asarray(buffer.env_id)[indices], kind="stable")
        idx = indices[order]
        env = np.asarray(buffer.env_id)[idx]
        n = len(idx)
        term = np.asarray(batch.terminated, dtype=bool)[order]
        done = term | np.asarray(batch.truncated, dtype=bool)[order]
        rew = np.asarray(batch.rew)[order]
        nxt = np.asarray(buffer.next(idx))
        first = np.asarray(buffer.prev(idx)) == idx  # first stored step of its episode
        # link[j]: step j continues step j-1's trajectory; start[j]: and begins an episode there
        link = np.zeros(n, dtype=bool)
        start = np.zeros(n, dtype=bool)
        if n > 1:
            same = env[1:] == env[:-1]
            same_episode = same & ~done[:-1] & (nxt[:-1] == idx[1:])
            next_episode = same & done[:-1] & first[1:]
            link[1:] = same_episode | next_episode
            start[1:] = next_episode
        traj_first = np.flatnonzero(~link)  # first step of every trajectory
        traj = np.cumsum(~link) - 1  # trajectory of every step
        pos = np.arange(n) - traj_first[traj]  # position inside its trajectory
        last = np.ones(n, dtype=bool)  # last step of its trajectory
        last[:-1] = ~link[1:]
        piece_end = done | last

        stored = batch.policy
        state = {k: np.asarray(stored[k])[order] for k in self.state_keys}
        inputs = self.prepare_inputs(take_rows(batch.obs, order))
        act = torch.as_tensor(np.asarray(batch.act)[order], dtype=self._action_dtype(), device=dev)

        # critic sequences: every trajectory with obs_next inserted after each bootstrapped
        # piece end (truncated, or cut by the end of the rollout)
        extra = piece_end & ~term
        aug_traj = np.concatenate([traj, traj[extra]])
        aug_pos = np.empty(n + int(extra.sum()), dtype=np.int64)
        shift = np.cumsum(extra) - extra  # inserted elements before step j in its trajectory
        shift = shift - shift[traj_first][traj]
        aug_pos[:n] = pos + shift
        aug_pos[n:] = (pos + shift + 1)[extra]
        aug_start = np.concatenate([start, np.zeros(int(extra.sum()), dtype=bool)])
        obs_next = take_rows(batch.obs_next, order[extra])
        aug_len = int(aug_pos.max()) + 1 if n else 1
        data: dict[str, Any] = {
            "obs": inputs,
            "act": act,

            "aug_inputs": self.prepare_inputs(obs_next),
            "aug_traj": torch.as_tensor(aug_traj, device=dev),
            "aug_pos": torch.as_tensor(aug_pos, device=dev),
            "aug_starts": _scatter(aug_start, aug_traj, aug_pos, len(traj_first), aug_len, dev),
            "aug_state0": {k: _tensor(state[k][traj_first], dev) for k in self.state_keys},
            "value_next_pos": torch.as_tensor(np.where(term, -1, aug_pos[:n] + 1), device=dev),
            "rew": rew,
            "terminated": term,
            "piece_end": piece_end,
        }
        if self.masked:  # the legal actions of every step (trajectory order)
            data["mask"] = observation_mask(obs_to_tensor(take_rows(batch.obs, order), dev))
        if self.prev_dim:
            # a step's inputs: the action and reward before it (stored views, as acting saw
            # them); an inserted bootstrap observation follows its step's own action and reward
            data["prev"] = self._prev(
                np.asarray(batch.prev_act)[order], np.asarray(batch.prev_rew)[order]
            )
            data["aug_prev"] = self._prev(np.asarray(batch.act)[order][extra], rew[extra])

        # learning windows: each trajectory cut every seq_len steps
        lengths = np.bincount(traj)
        t_len = min(c.seq_len, int(lengths.max()))  # no window longer than any trajectory
        traj_windows = -(-lengths // t_len)  # ceil(length / seq_len) per trajectory
        window_offset = np.cumsum(traj_windows) - traj_windows
        win = window_offset[traj] + pos // t_len
        col = pos % t_len
        n_win = int(traj_windows.sum())
        win_idx = np.zeros((n_win, t_len), dtype=np.int64)
        win_idx[win, col] = np.arange(n)
        win_first = win_idx[:, 0].copy()
        data.update(
            win_idx=torch.as_tensor(win_idx, device=dev),
            win_mask=_scatter(np.ones(n, dtype=bool), win, col, n_win, t_len, dev),
            win_starts=_scatter(start, win, col, n_win, t_len, dev),
            win_state0={k: _tensor(state[k][win_first], dev) for k in self.state_keys},
        )
        with torch.no_grad():
            data["logp_old"] = self._logp_all(data, n)
        self.compute_advantages(data, update_stats=True)
        return Batch(data)

    def _action_dtype(self) -> torch.dtype:
        return torch.float32 if isinstance(self.action_space, gym.spaces.Box) else torch.long

    @torch.no_grad()
    def compute_advantages(self, data: dict[str, Any], update_stats: bool = False) -> None:
        """Fill ``value_old``, ``adv`` and ``returns`` (critic targets, scaled) in ``data``: the
        critic runs over every trajectory (with the bootstrap observations inserted), then GAE."""
        c = self.config
        n = len(data["act"])
        feats = torch.cat([self.features(data["obs"]), self.features(data["aug_inputs"])])
        if self.prev_dim:
            feats = torch.cat([feats, torch.cat([data["prev"], data["aug_prev"]])], dim=-1)
        starts = data["aug_starts"]
        grid = feats.new_zeros((*starts.shape, feats.shape[-1]))
        traj, pos = data["aug_traj"], data["aug_pos"]
        grid[traj, pos] = feats
        y, _ = self.critic_rnn.sequence(grid, self._state_of(data["aug_state0"], "critic"), starts)
        v_grid = self.critic(y)  # [trajectories, longest]
        value = v_grid[traj[:n], pos[:n]]
        next_pos = data["value_next_pos"]
        value_next = v_grid[traj[:n], next_pos.clamp(min=0)].masked_fill(next_pos < 0, 0.0)
        scale = float(self.ret_rms.std) if self.ret_rms is not None else 1.0
        v = value.cpu().numpy() * scale
        adv = gae(
            data["rew"], v, value_next.cpu().numpy() * scale, data["terminated"],
            data["piece_end"], c.gamma, c.gae_lambda,
        )  # fmt: skip
        returns = adv + v
        if self.ret_rms is not None:
            if update_stats:
                self.ret_rms.update(returns)
            returns = returns / float(self.ret_rms.std)
        data["value_old"] = value
        data["returns"] = torch.as_tensor(returns, dtype=torch.float32, device=self.device)
        data["adv"] = torch.as_tensor(adv, dtype=torch.float32, device=self.device)

    def _state_of(self, states: dict[str, torch.Tensor], part: str, rows: Any = None) -> Any:
        """``part``'s memory (``{"h": ..., "c": ...}``) from a dict of full states, its
        ``rows`` only when given."""
        return {
            k: states[f"{part}_{k}"] if rows is None else states[f"{part}_{k}"][rows]
            for k in self._rnn(part).state_keys
        }

    def _window_forward(
        self, data: dict[str, Any], wids: torch.Tensor, critic: bool = True
    ) -> tuple[Any, torch.Tensor | None]:
        """The distribution and the values (when ``critic``) at every cell of windows ``wids``,
        flattened to ``[w * T]``; each window is replayed from its stored state with the
        episode starts inside it."""
        idx = data["win_idx"][wids]
        w, t_len = idx.shape
        flat = idx.flatten()
        prev = data["prev"][flat] if self.prev_dim else None
        x = self._with_prev(self.features(_take(data["obs"], flat)), prev).view(w, t_len, -1)
        starts = data["win_starts"][wids]
        state0 = data["win_state0"]
        y, _ = self.actor_rnn.sequence(x, self._state_of(state0, "actor", wids), starts)
        mask = data.get("mask")
        dist = mask_distribution(
            self.actor(y.reshape(w * t_len, -1)), None if mask is None else mask[flat]
        )
        value = None
        if critic:
            y, _ = self.critic_rnn.sequence(x, self._state_of(state0, "critic", wids), starts)
            value = self.critic(y.reshape(w * t_len, -1))
        return dist, value

    def _logp_all(self, data: dict[str, Any], n: int) -> torch.Tensor:
        """``log pi(a_t | o_t, memory)`` of every step (trajectory order), over the windows."""
        logp = torch.empty(n, device=self.device)
        n_win = data["win_idx"].shape[0]
        per_pass = max(1, 8192 // data["win_idx"].shape[1])
        for wids in torch.arange(n_win, device=self.device).split(per_pass):
            flat, valid = data["win_idx"][wids].flatten(), data["win_mask"][wids].flatten()
            dist, _ = self._window_forward(data, wids, critic=False)
            logp[flat[valid]] = dist.log_prob(data["act"][flat])[valid]
        return logp

    # -- learning -------------------------------------------------------------------------------
    def learn(
        self, batch: Batch, batch_size: int = 64, repeat: int = 10, **kwargs: Any
    ) -> dict[str, float]:
        c = self.config
        data = self.rollout(batch)
        eps = c.clip_ratio
        n_win = data["win_idx"].shape[0]
        t_len = data["win_idx"].shape[1]
        per_mb = n_win if batch_size <= 0 else max(1, batch_size // t_len)
        sums = torch.zeros(5, device=self.device)  # loss, clip loss, value loss, entropy, approx kl
        n_mb = 0
        stopped = False
        for r in range(repeat):
            if r > 0 and c.recompute_advantage:
                self.compute_advantages(data)
            for wids in torch.randperm(n_win, device=self.device).split(per_mb):
                flat, valid = data["win_idx"][wids].flatten(), data["win_mask"][wids].flatten()
                rows = flat[valid]  # the real steps of these windows
                dist, value = self._window_forward(data, wids)
                assert value is not None
                logp = dist.log_prob(data["act"][flat])[valid]
                log_ratio = logp - data["logp_old"][rows]
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - log_ratio).mean()
                if c.target_kl is not None and approx_kl > 1.5 * c.target_kl:
                    stopped = True
                    break
                adv = data["adv"][rows]
                if c.norm_adv:
                    adv = self.normalized(adv)
                surr = torch.min(ratio * adv, ratio.clamp(1.0 - eps, 1.0 + eps) * adv)
                clip_loss = -surr.mean()
                value = value[valid]
                ret = data["returns"][rows]
                v_old = data["value_old"][rows] if c.value_clip else None
                vf_loss = value_loss(value, ret, v_old, eps)
                entropy = dist.entropy()[valid].mean()
                loss = clip_loss + c.vf_coef * vf_loss - c.ent_coef * entropy
                self.optim_step.step(loss)
                self.gradient_steps += 1
                with torch.no_grad():
                    sums += torch.stack([loss, clip_loss, vf_loss, entropy, approx_kl]).float()
                n_mb += 1
            if stopped:
                break
        means = (sums / max(n_mb, 1)).tolist()
        return {
            "loss": means[0],
            "loss/clip": means[1],
            "loss/vf": means[2],
            "entropy": means[3],
            "approx_kl": means[4],
            "early_stop": float(stopped),
            "gradient_steps": n_mb,
        }


def _scatter(
    values: np.ndarray, rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int, device: Any
) -> torch.Tensor:
    """A ``[n_rows, n_cols]`` bool tensor, False except ``values`` at ``(rows, cols)``."""
    out = np.zeros((n_rows, n_cols), dtype=bool)
    out[rows, cols] = values
    return torch.as_tensor(out, device=device)


def _tensor(x: np.ndarray, device: Any) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32, device=device)


def _take(x: Any, idx: torch.Tensor) -> Any:
    """``x[idx]`` for a tensor or a dict of them (Dict observations with a learnable encoder)."""
    if isinstance(x, torch.Tensor):
        return x[idx]
    return {k: _take(x[k], idx) for k in x.keys()}  # noqa: SIM118 (dicts and Batches)


def _action_width(space: gym.Space) -> int:
    """Width of an action as a previous-action input (see ``RPPOPolicy._prev``)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.asarray(space.nvec).sum())
    return int(gym.spaces.flatdim(space))
