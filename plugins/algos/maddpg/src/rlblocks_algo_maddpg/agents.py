"""What the centralised-critic learners of many agents share (MADDPG, MATD3 and MASAC, which
imports this module): the joint view's spaces, per-agent networks, per-agent n-step targets
and the base policy that reads a joint batch.

The joint view (the PettingZoo family's, for algorithms whose spec says ``joint_agents``) turns
a multi-agent env into one gymnasium env whose step holds every agent::

    obs    = {"obs": [n_agents, obs_dim], "state": [state_dim]}    (a Dict observation)
    act    = [n_agents, act_dim]                                    (a Box)
    rew    = the team reward (the agents' sum);  info["agent_rewards"] = [n_agents]

so the standard collector, buffers and backends store joint transitions. A plain Box
observation and Box action (a single-agent env) are read as one agent whose global state is
its observation: MADDPG is then DDPG, MASAC is SAC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import OffPolicyPolicy, nstep_return
from rlblocks.algo.nets import EnsembleMLP
from rlblocks.contracts import Batch, Buffer, ConfigError, ViewRequirement

__all__ = [
    "AgentNetwork",
    "DeterministicAgentActor",
    "GaussianAgentActor",
    "JointSpaces",
    "MultiAgentActorCritic",
]

_LOG_2 = float(np.log(2.0))
_HALF_LOG_2PI = float(0.5 * np.log(2.0 * np.pi))


class JointSpaces:
    """Sizes read from a joint view's spaces: ``n_agents``, ``obs_dim``, ``act_dim`` and
    ``state_dim``; ``joint`` is False for a single-agent env (a Box observation)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, algo: str) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(
                f"{algo} needs Box (continuous) actions, got {action_space}; for discrete "
                "actions of many agents use qmix, vdn or mappo (MPE: --set "
                "'env.make_kwargs={\"continuous_actions\": true}')"
            )
        if isinstance(observation_space, gym.spaces.Dict):
            keys = observation_space.spaces
            if "obs" not in keys or "state" not in keys:
                raise ConfigError(
                    f"{algo} reads a joint view of many agents, a Dict observation with 'obs' "
                    f"and 'state', got the keys {list(keys)}; train it on a PettingZoo parallel "
                    "env id (e.g. 'mpe2.simple_spread_v3:parallel_env'), which the family gives "
                    "it as a joint view"
                )
            obs, state = keys["obs"], keys["state"]
            if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 2:
                raise ConfigError(f"{algo}: the joint view's 'obs' must be a Box [n_agents, "
                                  f"obs_dim], got {obs}")  # fmt: skip
            if len(action_space.shape) != 2 or action_space.shape[0] != obs.shape[0]:
                raise ConfigError(
                    f"{algo}: the joint action space must be a Box [n_agents={obs.shape[0]}, "
                    f"act_dim], got {action_space}"
                )
            self.joint = True
            self.n_agents, self.obs_dim = int(obs.shape[0]), int(obs.shape[1])
            self.state_dim = int(gym.spaces.flatdim(state))
            self.act_dim = int(action_space.shape[1])
        elif isinstance(observation_space, gym.spaces.Box):
            self.joint = False
            self.n_agents = 1
            self.obs_dim = self.state_dim = int(np.prod(observation_space.shape))
            self.act_dim = int(np.prod(action_space.shape))
        else:
            raise ConfigError(
                f"{algo} reads a joint view of many agents (a Dict with 'obs' and 'state') or a "
                f"single agent's Box observation, got {observation_space}"
            )


class AgentNetwork(nn.Module):
    """An MLP per agent (and per ensemble member), evaluated for all of them at once:
    ``x [B, n_agents, in] -> [members, B, n_agents, out]``.

    ``shared``: one network (per member) for every agent, whose input gets a one-hot of the
    agent's index (parameter sharing); else separate weights per agent, one batched matrix
    product per layer for all of them."""

    def __init__(
        self,
        n_agents: int,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int],
        activation: str = "relu",
        shared: bool = True,
        members: int = 1,
    ) -> None:
        super().__init__()
        self.n_agents, self.members, self.out_dim = n_agents, members, out_dim
        # one agent needs no index: sharing and not sharing are the same network
        self.shared = shared and n_agents > 1
        if self.shared:
            self.net = EnsembleMLP(members, in_dim + n_agents, hidden, out_dim, activation)
            self.register_buffer("ids", torch.eye(n_agents), persistent=False)
        else:
            self.net = EnsembleMLP(members * n_agents, in_dim, hidden, out_dim, activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n = x.shape[0], self.n_agents
        m = self.members
        if self.shared:
            x = torch.cat([x, self.ids.expand(b, n, n)], dim=-1)
            return self.net(x.reshape(b * n, -1)).view(m, b, n, self.out_dim)
        x = x.transpose(0, 1)  # [n, B, in]
        if m > 1:
            x = x.repeat(m, 1, 1)
        return self.net(x).view(m, n, b, self.out_dim).transpose(1, 2)


class DeterministicAgentActor(nn.Module):
    """``a_i = tanh(mu_i(o_i))`` for every agent: ``[B, n, obs_dim] -> [B, n, act_dim]``."""

    def __init__(
        self, spaces: JointSpaces, hidden: Sequence[int], activation: str, shared: bool
    ) -> None:
        super().__init__()
        self.net = AgentNetwork(
            spaces.n_agents, spaces.obs_dim, spaces.act_dim, hidden, activation, shared
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)[0])


class GaussianAgentActor(nn.Module):
    """A tanh-squashed diagonal Gaussian per agent (SAC's policy, one per agent):
    ``forward(obs [B, n, obs_dim])`` gives reparameterised actions ``[B, n, act_dim]`` in
    [-1, 1] and their log-probabilities ``[B, n]``."""

    def __init__(
        self,
        spaces: JointSpaces,
        hidden: Sequence[int],
        activation: str,
        shared: bool,
        log_std_bounds: tuple[float, float],
    ) -> None:
        super().__init__()
        self.net = AgentNetwork(
            spaces.n_agents, spaces.obs_dim, 2 * spaces.act_dim, hidden, activation, shared
        )
        self.log_std_min, self.log_std_max = log_std_bounds

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False, with_log_prob: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mean, log_std = self.net(obs)[0].chunk(2, dim=-1)
        log_std = log_std.clamp(self.log_std_min, self.log_std_max)
        noise = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        act = torch.tanh(u)
        if not with_log_prob:
            return act, None
        # log N(u; mean, std) less the tanh's change of variables log(1 - tanh(u)^2), the
        # latter as 2 (log 2 - u - softplus(-2u)), which stays finite where tanh saturates
        gauss = (-0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        return act, gauss - (2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)


class _AgentRewardSource:
    """A buffer whose ``rew`` reads each step's per-agent rewards ``[n_agents]`` (the stored
    ``info.agent_rewards``), so :func:`rlblocks.algo.nstep_return` sums them per agent."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer

    def next(self, index: Any) -> Any:
        return self._buffer.next(index)

    def get(self, index: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        if key == "rew":
            return np.asarray(self._buffer.get(index, "info", stack_num=1)["agent_rewards"])
        return self._buffer.get(index, key, *args, **kwargs)


class MultiAgentActorCritic(OffPolicyPolicy):
    """Base of MADDPG and MASAC: decentralised actors on each agent's own observation,
    centralised critics ``Q_i(x, a_1..a_n)`` per agent on the global state (or all agents'
    observations) and every agent's action, learning from per-agent n-step targets.

    A subclass builds ``self.actor`` (obs rows ``[B, n, obs_dim]`` to actions) and
    ``self.critic`` (an :class:`AgentNetwork` of ``critic_in_dim`` inputs and 1 output), and
    writes ``forward``, ``target_value`` (``[B, n]``) and ``learn``.
    """

    #: the algorithm's name in error messages
    algo_name = "maddpg"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device = "cpu",
    ) -> None:
        self.spaces = JointSpaces(observation_space, action_space, self.algo_name)
        super().__init__(observation_space, action_space, config, device)
        sp = self.spaces
        self.critic_x_dim = sp.state_dim if config.critic_input == "state" else (
            sp.n_agents * sp.obs_dim
        )  # fmt: skip
        #: the critics' input: the global state (or all obs) and all agents' actions
        self.critic_in_dim = self.critic_x_dim + sp.n_agents * sp.act_dim
        #: agent i's own action from the actor, the others' as stored (the paper's actor loss)
        self.register_buffer("_own", torch.eye(sp.n_agents)[:, :, None], persistent=False)
        self.per_agent_rewards = bool(config.agent_rewards and sp.joint)
        if self.per_agent_rewards:
            # asks the collector to store each step's info["agent_rewards"] (as info.agent_rewards)
            self.view_requirements = {
                "agent_rewards": ViewRequirement(
                    "info.agent_rewards",
                    space=gym.spaces.Box(-np.inf, np.inf, (sp.n_agents,), np.float32),
                    used_for_acting=False,
                    used_for_training=False,
                )
            }

    # -- reading joint batches ----------------------------------------------------------------
    def split_obs(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(agent rows [B, n, obs_dim], critic input x [B, critic_x_dim])`` of observations
        (already tensors)."""
        if not self.spaces.joint:
            flat = obs.reshape(obs.shape[0], -1)
            return flat.unsqueeze(1), flat
        rows = obs["obs"]
        if self.config.critic_input == "obs":
            return rows, rows.reshape(rows.shape[0], -1)
        state = obs["state"]
        return rows, state.reshape(state.shape[0], -1)

    def joint_act(self, act: Any) -> torch.Tensor:
        """Stored actions as ``[B, n, act_dim]`` tensors."""
        act = self.as_tensor(act)
        return act.reshape(act.shape[0], self.spaces.n_agents, self.spaces.act_dim)

    def env_act(self, act: torch.Tensor) -> np.ndarray:
        """Actions ``[B, n, act_dim]`` in the action space's shape, on the host."""
        return act.reshape(act.shape[0], *self.action_space.shape).cpu().numpy()

    def critic_input(self, x: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Every agent's critic input ``[B, n, critic_in_dim]``: ``x`` with the joint action
        ``[B, n, act_dim]`` (the same for every agent), or with ``[B, n, n, act_dim]``, the
        joint action agent ``i``'s critic is asked about in row ``i``."""
        b, n = x.shape[0], self.spaces.n_agents
        shared = act.dim() == 3
        act = act.reshape(b, 1, -1).expand(b, n, -1) if shared else act.reshape(b, n, -1)
        return torch.cat([x.unsqueeze(1).expand(b, n, -1), act], dim=-1)

    def own_action(self, own: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
        """``[B, n, n, act_dim]``: row ``i`` is the stored joint action with agent ``i``'s own
        replaced by ``own[:, i]`` (the actor's, which the gradient flows through)."""
        return self._own * own.unsqueeze(1) + (1.0 - self._own) * stored.unsqueeze(1)

    # -- targets ------------------------------------------------------------------------------
    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """``batch.returns`` ``[B, n]``: every agent's n-step TD target, from its own rewards
        (``agent_rewards``) or the team's, bootstrapped by ``target_value``."""
        c = self.config
        source: Any = _AgentRewardSource(buffer) if self.per_agent_rewards else buffer
        partial, boot, discount = nstep_return(
            source, indices, c.gamma, c.n_step,
            rebuilds_obs_next=self.buffer_abilities(buffer).rebuilds_obs_next,
        )  # fmt: skip
        obs_next = batch.obs_next if c.n_step == 1 else buffer.get(boot, "obs_next")
        partial = self.as_tensor(np.asarray(partial, dtype=np.float32))
        if partial.dim() == 1:  # the team reward, for every agent's critic
            partial = partial.unsqueeze(1)
        with torch.no_grad():
            value = self.target_value(self.obs_tensor(obs_next))
        batch.returns = partial + self.as_tensor(discount).unsqueeze(1) * value
        return batch

    def td_loss(self, q: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, td [members, B, n])`` of critics ``q [members, B, n]`` against
        ``batch.returns``: the squared TD errors' batch mean (PER-weighted), summed over agents
        and members as separate critics' losses would be."""
        td = q - batch.returns
        sq = td.pow(2)
        weight = self.weights(batch)
        if weight is not None:
            sq = sq * weight[:, None]
        return sq.mean(dim=1).sum(), td.detach()

    def critic_stats(self, batch: Batch, td: torch.Tensor) -> None:
        """Priorities for a prioritized buffer: the mean absolute TD error of each row."""
        batch.td_error = td.abs().mean(dim=(0, 2))
