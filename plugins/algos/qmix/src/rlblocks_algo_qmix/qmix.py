"""Value decomposition for cooperative agents: VDN (Sunehag et al., 2018, "Value-Decomposition
Networks For Cooperative Multi-Agent Learning") and QMIX (Rashid et al., 2018, "QMIX: Monotonic
Value Function Factorisation for Deep Multi-Agent Reinforcement Learning").

Both learn one Q-value of the team, ``Q_tot``, from the team's reward, as a function of per-agent
utilities ``Q_a(o_a, u_a)`` that each agent can maximise on its own (decentralised acting):

* **Agent networks** (both papers) — :class:`AgentQNetwork`, one network shared by every agent
  (parameter sharing) whose input is the agent's observation and a one-hot of its index
  (``agent_id``); an MLP, or with ``recurrent`` an MLP, a GRU cell and a linear head (the papers'
  DRQN agents), whose state the collector carries from step to step.
* **Mixing** — VDN: ``Q_tot = sum_a Q_a`` (:class:`VDNMixer`). QMIX (section 4):
  ``Q_tot = w2 . elu(W1 q + b1) + V(s)``, where hypernetworks of the global state ``s`` produce
  ``W1`` (``n_agents x embed``), ``b1``, ``w2`` (``embed``) and ``V(s)`` (two layers), and the
  weights are made non-negative by an absolute value, so ``dQ_tot / dQ_a >= 0``: the team's
  greedy joint action is every agent's own greedy action (:class:`QMixer`).
* **Targets** — ``y = r + gamma (1 - terminated) Q_tot^-(s', argmax_u Q_a(o'_a, u))`` with
  target copies of the agent and mixing networks, the next actions picked by the online agent
  network (double Q) and valued by the target one; n-step returns with ``n_step > 1``
  (feed-forward agents). Loss: squared TD error of ``Q_tot`` (mse, or huber).
* **Exploration** — epsilon-greedy per agent on a linear schedule; a random action is drawn
  among the agent's legal ones, and greedy actions too honour the ``action_mask`` of the
  observation (masked actions get ``-inf``), in acting and in the target's argmax.
* **Recurrent learning** — with ``recurrent`` the buffer gives windows of consecutive steps
  (``buffer.sampler=sequence``); each window is unrolled from the GRU state the actor had at
  its first step (stored with every step), both networks over the window's observations
  followed by its last next observation, and the loss is on the window's learned steps. With
  ``buffer.start=episode`` and a window as long as the episode this is the papers' training on
  whole episodes from a zero state.

The env is seen through the joint view (``AlgoSpec.joint_agents``): one observation Dict of
every agent's ``obs`` ``[n_agents, obs_dim]``, the global ``state`` (and ``action_mask``), a
``MultiDiscrete`` action of every agent, and the team's reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import OffPolicyPolicy, OptimizerStep, TargetNetwork
from rlblocks.algo.nets import MLP
from rlblocks.contracts import Batch, Buffer, ConfigError
from rlblocks_algo_qmix.config import QMIXConfig, VDNConfig

__all__ = ["AgentQNetwork", "QMIXPolicy", "QMixer", "VDNMixer", "VDNPolicy"]


class AgentQNetwork(nn.Module):
    """Utilities ``Q_a`` of every action from an agent's input ``[..., in_dim]``: an MLP, or
    with ``rnn_hidden`` an MLP, a GRU cell and a linear head."""

    def __init__(
        self,
        in_dim: int,
        n_actions: int,
        hidden: list[int],
        activation: str = "relu",
        rnn_hidden: int | None = None,
    ) -> None:
        super().__init__()
        self.rnn_hidden = rnn_hidden
        if rnn_hidden is None:
            self.body = MLP(in_dim, hidden, n_actions, activation)
            return
        self.body = MLP(in_dim, hidden, None, activation)
        self.gru = nn.GRUCell(self.body.out_dim, rnn_hidden)
        self.head = nn.Linear(rnn_hidden, n_actions)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(q [..., A], next state [..., H])`` of one step (state None: feed-forward, or the
        zero state of a fresh episode)."""
        if self.rnn_hidden is None:
            return self.body(x), None
        lead = x.shape[:-1]
        f = self.body(x).reshape(-1, self.body.out_dim)
        h_in = None if h is None else h.reshape(-1, self.rnn_hidden)
        h_out = self.gru(f, h_in)
        return self.head(h_out).reshape(*lead, -1), h_out.reshape(*lead, self.rnn_hidden)

    def unroll(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        """Utilities ``[B, T, N, A]`` over a sequence ``x [B, T, N, in]`` from ``h0 [B, N, H]``."""
        outs, h = [], h0
        for t in range(x.shape[1]):
            q, h = self(x[:, t], h)
            outs.append(q)
        return torch.stack(outs, dim=1)


class VDNMixer(nn.Module):
    """VDN's team value: the sum of the agents' utilities (the state is not used)."""

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return q.sum(dim=-1)


class QMixer(nn.Module):
    """QMIX's monotonic mixing network, its weights made by hypernetworks of the state:
    ``Q_tot = |w2(s)| . elu(|W1(s)| q + b1(s)) + V(s)`` over ``q [..., N]``, ``s [..., S]``."""

    def __init__(self, n_agents: int, state_dim: int, embed: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.n_agents, self.embed = n_agents, embed
        self.hyper_w1 = MLP(state_dim, [hidden], n_agents * embed)
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_w2 = MLP(state_dim, [hidden], embed)
        self.value = MLP(state_dim, [embed], 1)

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        lead = q.shape[:-1]
        s = state.reshape(-1, state.shape[-1])
        w1 = self.hyper_w1(s).abs().view(-1, self.n_agents, self.embed)
        b1 = self.hyper_b1(s).view(-1, 1, self.embed)
        hidden = F.elu(torch.bmm(q.reshape(-1, 1, self.n_agents), w1) + b1)  # [M, 1, E]
        w2 = self.hyper_w2(s).abs().view(-1, self.embed, 1)
        q_tot = torch.bmm(hidden, w2).view(-1) + self.value(s).view(-1)
        return q_tot.view(lead)


def _joint_spaces(name: str, obs_space: gym.Space, act_space: gym.Space) -> tuple[int, int, int]:
    """``(n_agents, obs_dim, n_actions)`` of the joint view, or a one-line refusal."""
    spaces = getattr(obs_space, "spaces", {})
    obs = spaces.get("obs") if isinstance(obs_space, gym.spaces.Dict) else None
    if (
        obs is None
        or "state" not in spaces
        or not isinstance(obs, gym.spaces.Box)
        or len(obs.shape) != 2
        or not isinstance(act_space, gym.spaces.MultiDiscrete)
        or act_space.shape != obs.shape[:1]
        or len(set(np.asarray(act_space.nvec).tolist())) != 1
    ):
        raise ConfigError(
            f"{name} learns from the joint view of a cooperative multi-agent env (a Dict "
            "observation of 'obs' [n_agents, obs_dim] and 'state', a MultiDiscrete action of "
            f"every agent); got {obs_space} and {act_space}: train it on a PettingZoo parallel "
            "env with discrete actions (e.g. --env mpe2.simple_spread_v3:parallel_env)"
        )
    return int(obs.shape[0]), int(obs.shape[1]), int(np.asarray(act_space.nvec)[0])


class VDNPolicy(OffPolicyPolicy):
    """VDN over the joint view (see the module docstring); :class:`QMIXPolicy` changes only
    the mixer."""

    algo_name = "VDN"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: VDNConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        c = config or self.default_config()
        super().__init__(observation_space, action_space, c, device)
        self.config = c
        self.n_agents, obs_dim, self.n_actions = _joint_spaces(
            self.algo_name, observation_space, action_space
        )
        if c.recurrent and c.n_step > 1:
            raise ConfigError(
                f"$.algo.n_step: recurrent {self.algo_name} learns one-step targets inside its "
                "windows; set algo.n_step=1 (or algo.recurrent=false)"
            )
        self.masked = "action_mask" in observation_space.spaces
        self.state_dim = int(np.prod(observation_space["state"].shape))
        in_dim = obs_dim + (self.n_agents if c.agent_id else 0)
        agent = AgentQNetwork(
            in_dim, self.n_actions, list(c.hidden_sizes), c.activation,
            c.rnn_hidden if c.recurrent else None,
        )  # fmt: skip
        self.model = nn.ModuleDict({"agent": agent, "mixer": self.make_mixer()}).to(self.device)
        self.register_buffer("agent_ids", torch.eye(self.n_agents, device=self.device))
        self.target = TargetNetwork(
            self.model, tau=c.tau, hard_update_interval=c.target_update_interval
        )
        self.optim_step = self.add_optimizer(
            "q", OptimizerStep(self.model, c.lr, max_grad_norm=c.max_grad_norm)
        )

    @staticmethod
    def default_config() -> VDNConfig:
        return VDNConfig()

    def make_mixer(self) -> nn.Module:
        """The network that makes ``Q_tot`` from the agents' utilities."""
        return VDNMixer()

    # -- inputs -------------------------------------------------------------------------------
    def agent_inputs(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Each agent's network input ``[..., N, in]``: its observation and its one-hot id."""
        x = obs["obs"].float()
        if not self.config.agent_id:
            return x
        ids = self.agent_ids.expand(*x.shape[:-2], self.n_agents, self.n_agents)
        return torch.cat([x, ids], dim=-1)

    def legal(self, obs: Mapping[str, Any]) -> torch.Tensor | None:
        """The legal actions ``[..., N, A]`` (bool), None without masks."""
        if not self.masked:
            return None
        return torch.as_tensor(obs["action_mask"], device=self.device).bool()

    @staticmethod
    def masked_argmax(q: torch.Tensor, legal: torch.Tensor | None) -> torch.Tensor:
        """Each agent's best legal action (indices ``[..., N]``)."""
        if legal is not None:
            q = q.masked_fill(~legal, float("-inf"))
        return q.argmax(dim=-1)

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Each agent's greedy legal action ``act [B, N]`` (``eps_test`` of them random in
        test mode); recurrent: the GRU state after this step as ``state`` and the one entering
        it as ``policy.state`` (stored with the step, so replayed windows start from it)."""
        obs = self.obs_tensor(batch.obs)
        x = self.agent_inputs(obs)
        agent = self.model["agent"]
        out = Batch()
        if self.config.recurrent:
            h = None if state is None else torch.as_tensor(state["h"], device=self.device)
            if h is None:
                h = x.new_zeros(*x.shape[:-1], self.config.rnn_hidden)
            q, h_next = agent(x, h)
            out.state = {"h": h_next.detach()}
            out.policy = Batch(state={"h": h})
        else:
            q, _ = agent(x)
        legal = self.legal(obs)
        out.act = self.masked_argmax(q, legal).cpu().numpy()
        out.logits = q
        if legal is not None:
            out.legal = legal.cpu().numpy()
        if not self.training and self.config.eps_test:
            out.act = self.exploration_noise(out.act, out)
        return out

    @property
    def epsilon(self) -> float:
        """Exploration rate now: the schedule while collecting for training, ``eps_test`` while
        testing."""
        c = self.config
        if not self.training:
            return c.eps_test
        if c.eps_decay_steps == 0:
            return c.eps_end
        frac = min(1.0, self.env_step / c.eps_decay_steps)
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def schedule_stats(self) -> dict[str, float]:
        return {**super().schedule_stats(), "epsilon": self.epsilon}

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        """Each agent's action replaced, with probability epsilon, by one drawn uniformly among
        its legal actions (``batch.legal`` from :meth:`forward`)."""
        eps = self.epsilon
        if eps <= 0.0:
            return act
        act = np.asarray(act)
        rng = self._rng
        draw = rng.random((*act.shape, self.n_actions))
        legal = batch.get("legal", None)
        if legal is not None:
            draw = np.where(legal, draw, -1.0)
        explore = rng.random(act.shape) < eps
        return np.where(explore, draw.argmax(axis=-1), act)

    # -- learning: single transitions -----------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``Q_tot^-`` of the next state at each agent's next action (double Q)."""
        x = self.agent_inputs(obs_next)
        target = self.target.net
        q_next, _ = target["agent"](x)
        legal = self.legal(obs_next)
        pick = self.model["agent"](x)[0] if self.config.double else q_next
        best = self.masked_argmax(pick, legal)
        chosen = q_next.gather(-1, best.unsqueeze(-1)).squeeze(-1)
        return target["mixer"](chosen, obs_next["state"].float())

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Transitions get their n-step target (``batch.returns``); windows (recurrent) carry
        what :meth:`learn` needs."""
        if self.config.recurrent:
            if np.ndim(indices) != 2:
                raise ConfigError(
                    f"recurrent {self.algo_name} learns from windows of steps: set "
                    "buffer.sampler=sequence (and buffer.length)"
                )
            return batch
        return super().process_fn(batch, buffer, indices)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        if self.config.recurrent:
            return self._learn_windows(batch)
        obs = self.obs_tensor(batch.obs)
        q, _ = self.model["agent"](self.agent_inputs(obs))
        act = torch.as_tensor(np.asarray(batch.act), dtype=torch.long, device=self.device)
        q_taken = q.gather(-1, act.unsqueeze(-1)).squeeze(-1)  # [B, N]
        q_tot = self.model["mixer"](q_taken, obs["state"].float())
        target = batch.returns
        per_sample = self._td_loss(q_tot, target)
        weight = self.weights(batch)
        if weight is not None:
            per_sample = per_sample * weight
        loss = per_sample.mean()
        self._finish_step(loss)
        batch.td_error = (q_tot - target).detach().abs()
        return {"loss": loss.detach(), "q_tot": q_tot.detach().mean()}

    # -- learning: windows (recurrent) --------------------------------------------------------
    def _learn_windows(self, batch: Batch) -> dict[str, Any]:
        c = self.config
        mask_np = np.asarray(batch.mask, dtype=bool)
        learn = torch.as_tensor(
            np.asarray(batch.get("learn_mask", mask_np), dtype=bool), device=self.device
        ).float()
        width = mask_np.shape[1]
        obs = self.obs_tensor(_with_next(batch.obs, batch.obs_next))  # [B, W + 1, ...]
        x = self.agent_inputs(obs)
        stored = batch.get("policy", None)
        if stored is None or stored.get("state", None) is None:
            raise ValueError(
                "the windows carry no stored GRU state (policy.state): fill the buffer by "
                "acting with this policy (no random warm-up steps: trainer.warmup_steps=0)"
            )
        h0 = self.as_tensor(np.asarray(stored["state"]["h"])[:, 0])  # [B, N, H]
        q_all = self.model["agent"].unroll(x, h0)  # [B, W + 1, N, A]
        state = obs["state"].float()
        act = torch.as_tensor(np.asarray(batch.act), dtype=torch.long, device=self.device)
        q_taken = q_all[:, :width].gather(-1, act.unsqueeze(-1)).squeeze(-1)  # [B, W, N]
        q_tot = self.model["mixer"](q_taken, state[:, :width])  # [B, W]
        with torch.no_grad():
            target_net = self.target.net
            q_next = target_net["agent"].unroll(x, h0)[:, 1:]
            pick = q_all[:, 1:].detach() if c.double else q_next
            best = self.masked_argmax(pick, self.legal({k: v[:, 1:] for k, v in obs.items()}))
            chosen = q_next.gather(-1, best.unsqueeze(-1)).squeeze(-1)
            boot = target_net["mixer"](chosen, state[:, 1:])
            term = self.as_tensor(np.asarray(batch.terminated, dtype=np.float32))
            target = self.as_tensor(batch.rew) + c.gamma * (1.0 - term) * boot
        per_window = (self._td_loss(q_tot, target) * learn).sum(dim=1)
        weight = self.weights(batch)
        if weight is not None:
            per_window = per_window * weight
        steps = learn.sum().clamp(min=1.0)
        loss = per_window.sum() / steps
        self._finish_step(loss)
        abs_td = (q_tot - target).detach().abs() * learn
        batch.td_error = abs_td.max(dim=1).values
        return {"loss": loss.detach(), "q_tot": ((q_tot.detach() * learn).sum() / steps)}

    def _td_loss(self, q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.config.loss == "huber":
            return F.smooth_l1_loss(q, target, reduction="none")
        return (q - target).pow(2)

    def _finish_step(self, loss: torch.Tensor) -> None:
        self.optim_step.step(loss)
        self.gradient_steps += 1
        self.target.update()


class QMIXPolicy(VDNPolicy):
    """QMIX over the joint view: VDN's agents and targets with the monotonic hypernetwork
    mixer on the global state (see the module docstring)."""

    algo_name = "QMIX"
    config: QMIXConfig

    @staticmethod
    def default_config() -> QMIXConfig:
        return QMIXConfig()

    def make_mixer(self) -> nn.Module:
        c = self.config
        if not isinstance(c, QMIXConfig):
            raise TypeError(f"QMIX takes a QMIXConfig, got {type(c).__name__}")
        return QMixer(self.n_agents, self.state_dim, c.mixing_embed_dim, c.hypernet_hidden)


def _with_next(obs: Any, obs_next: Any) -> Any:
    """``[B, W + 1]`` observations of ``[B, W]`` windows: the first observation, then every
    step's next one (inside an episode ``obs_next[t] = obs[t + 1]``, and the last column holds
    the window's bootstrap observation)."""
    if isinstance(obs, Mapping) or hasattr(obs, "keys"):
        return {k: _with_next(obs[k], obs_next[k]) for k in obs.keys()}  # noqa: SIM118
    return np.concatenate([np.asarray(obs)[:, :1], np.asarray(obs_next)], axis=1)
