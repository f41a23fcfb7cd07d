"""The joint view: a PettingZoo parallel env seen as ONE single-agent gymnasium env.

Learners of joint transitions (QMIX and VDN's value decomposition, centralised critics that
take every agent's action) want all agents' observations, actions and rewards of one env step
in one row. :class:`JointAgentEnv` gives them that as a plain gymnasium env, so the standard
single-agent collector, buffers and vector-env backends (dummy, subproc, shmem) run it
unchanged:

* observation: a Dict with ``"obs"`` (``(n_agents, obs_dim)``, agents in ``possible_agents``
  order, each row zero-padded to the largest observation), ``"state"`` (the env's
  ``state()``, or the agents' observations concatenated when it has none) and, when the
  agents' observations carry PettingZoo's ``action_mask``, ``"action_mask"``
  (``(n_agents, n_actions)``);
* action: ``MultiDiscrete([n_actions] * n_agents)`` for Discrete agents,
  ``Box(n_agents, act_dim)`` for Box agents (all agents must share one action space);
* reward: the team's, the sum of the agents' rewards; ``info["agent_rewards"]`` holds each
  agent's (float32, ``n_agents``) and ``info["agents_alive"]`` which agents still act;
* the episode ends when no agent is left: it is terminated when every agent terminated (or
  they left without a truncation), truncated when any agent was truncated. An agent that has
  left (or not yet come) gets a zero observation row (an agent that ends at a step still
  shows its final observation there), its action is ignored, and its mask row
  allows only action 0 (a no-op, as SMAC gives dead units), so that masked acting always has a
  legal action.

An algorithm asks for this view with ``AlgoSpec.joint_agents``; the PettingZoo family then
builds the run's envs from :class:`JointEnvFactory` (picklable: subprocess backends send it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts import ConfigError
from rlblocks_family_pettingzoo.multiagent import (
    is_aec,
    multiagent_factory,
    multiagent_wrappers,
)

__all__ = ["JointAgentEnv", "JointEnvFactory"]

#: the key of a Dict observation PettingZoo envs use for the observation beside the mask
_OBS_KEY = "observation"
_MASK_KEY = "action_mask"


def _flat_box(space: gym.Space) -> gym.spaces.Box:
    """``space`` flattened to a 1-D float32 Box (a Box as it is, flattened)."""
    flat = gym.spaces.flatten_space(space)
    if not isinstance(flat, gym.spaces.Box):  # pragma: no cover - flatten_space gives a Box
        raise ConfigError(f"the joint view cannot flatten the observation space {space}")
    return gym.spaces.Box(
        flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
    )


class JointAgentEnv(gym.Env):
    """A PettingZoo *parallel* env as one gymnasium env over all its agents (module docstring).

    Args:
        env: a PettingZoo ``ParallelEnv`` (AEC envs are refused: their agents act in turns).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's own attribute

    def __init__(self, env: Any) -> None:
        if not hasattr(env, "possible_agents"):
            raise ConfigError(
                f"{type(env).__name__} is not a PettingZoo env (no possible_agents); the joint "
                "view wraps a PettingZoo ParallelEnv"
            )
        if is_aec(env):
            raise ConfigError(
                f"{type(env).__name__} is an AEC env (agents act in turns), and the joint view "
                "steps all agents at once: use the module's parallel_env constructor"
            )
        self.env = env
        self.agents: list[str] = list(env.possible_agents)
        self.n_agents = len(self.agents)
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        spaces = [env.observation_space(a) for a in self.agents]
        #: the agents' observations carry PettingZoo's action mask (a Dict with ``action_mask``)
        self.masked = all(isinstance(s, gym.spaces.Dict) and _MASK_KEY in s.spaces for s in spaces)
        #: each agent's observation space without its action mask (what a row flattens)
        self._inner_spaces = [self._inner_space(s) for s in spaces]
        obs_spaces = [_flat_box(s) for s in self._inner_spaces]
        self._obs_spaces = obs_spaces
        self.obs_dims = [int(s.shape[0]) for s in obs_spaces]
        self.obs_dim = max(self.obs_dims)
        low = np.zeros((self.n_agents, self.obs_dim), dtype=np.float32)
        high = np.zeros((self.n_agents, self.obs_dim), dtype=np.float32)
        for i, s in enumerate(obs_spaces):
            low[i, : self.obs_dims[i]] = s.low
            high[i, : self.obs_dims[i]] = s.high
        self.action_space = self._joint_action_space()
        state_space = getattr(env, "state_space", None)
        self.has_state = state_space is not None and callable(getattr(env, "state", None))
        if self.has_state:
            self._state_space = _flat_box(state_space)
        else:  # the agents' observations side by side
            self._state_space = gym.spaces.Box(
                np.concatenate([s.low for s in obs_spaces]),
                np.concatenate([s.high for s in obs_spaces]),
                dtype=np.float32,
            )
        entries: dict[str, gym.Space] = {
            "obs": gym.spaces.Box(low, high, dtype=np.float32),
            "state": self._state_space,
        }
        if self.masked:
            if not isinstance(self._agent_action_space, gym.spaces.Discrete):
                raise ConfigError(
                    f"{type(env).__name__}: its agents' observations carry action masks, and "
                    f"their action space is {self._agent_action_space}; masks need Discrete "
                    "actions"
                )
            entries["action_mask"] = gym.spaces.MultiBinary((self.n_agents, self.n_actions))
        self.observation_space = gym.spaces.Dict(entries)
        self._alive = np.zeros(self.n_agents, dtype=bool)
        self._terminated = np.zeros(self.n_agents, dtype=bool)
        self._truncated = False
        self._last = [np.zeros(d, dtype=np.float32) for d in self.obs_dims]

    # -- spaces -------------------------------------------------------------------------------
    def _joint_action_space(self) -> gym.Space:
        spaces = [self.env.action_space(a) for a in self.agents]
        first = spaces[0]
        if any(repr(s) != repr(first) for s in spaces[1:]):
            raise ConfigError(
                f"{type(self.env).__name__}: the joint view needs one action space shared by "
                f"all agents, and they have {sorted({repr(s) for s in spaces})}; pad them with "
                "a PettingZoo wrapper (env.wrappers) or train ippo/mappo with "
                "env.policy_mapping"
            )
        self._agent_action_space = first
        if isinstance(first, gym.spaces.Discrete):
            self.n_actions = int(first.n)
            self._action_start = int(first.start)
            return gym.spaces.MultiDiscrete([self.n_actions] * self.n_agents)
        if isinstance(first, gym.spaces.Box):
            self.n_actions = 0
            low = np.broadcast_to(first.low, (self.n_agents, *first.shape))
            high = np.broadcast_to(first.high, (self.n_agents, *first.shape))
            return gym.spaces.Box(low.copy(), high.copy(), dtype=first.dtype)  # type: ignore[arg-type]
        raise ConfigError(
            f"{type(self.env).__name__}: the joint view takes Discrete or Box agent actions, "
            f"and its agents act in {first}"
        )

    # -- observations -------------------------------------------------------------------------
    def _inner_space(self, space: gym.Space) -> gym.Space:
        """An agent's observation space without its action mask."""
        if not self.masked:
            return space
        if _OBS_KEY in space.spaces:
            return space[_OBS_KEY]
        return gym.spaces.Dict({k: v for k, v in space.spaces.items() if k != _MASK_KEY})

    def _split(self, agent_obs: Any) -> tuple[Any, Any]:
        """An agent's observation and mask (None without masks)."""
        if self.masked:
            mask = agent_obs[_MASK_KEY]
            inner = (
                agent_obs[_OBS_KEY]
                if _OBS_KEY in agent_obs
                else {k: v for k, v in agent_obs.items() if k != _MASK_KEY}
            )
            return inner, mask
        return agent_obs, None

    def _observe(self, obs: Mapping[str, Any], shown: np.ndarray) -> dict[str, np.ndarray]:
        """The joint observation; agents not ``shown`` (gone before this step, or not yet
        come) get zero rows."""
        shown_obs = {a: obs[a] for i, a in enumerate(self.agents) if shown[i] and a in obs}
        out, self._last = self._rows(shown_obs)
        out["state"] = self._global_state()
        return out

    def _rows(self, obs: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """The ``obs`` rows (and ``action_mask``) of the agents in ``obs``, zero rows (and
        only the no-op legal) for the others; and each agent's flat observation."""
        rows = np.zeros((self.n_agents, self.obs_dim), dtype=np.float32)
        mask = np.zeros((self.n_agents, max(self.n_actions, 1)), dtype=np.int8)
        flats = []
        for i, agent in enumerate(self.agents):
            if agent not in obs:
                flats.append(np.zeros(self.obs_dims[i], dtype=np.float32))
                mask[i, 0] = 1  # a departed agent's action is ignored: only the no-op is legal
                continue
            inner, m = self._split(obs[agent])
            flat = np.asarray(gym.spaces.flatten(self._inner_spaces[i], inner), dtype=np.float32)
            flats.append(flat)
            rows[i, : self.obs_dims[i]] = flat
            if m is not None:
                mask[i] = np.asarray(m, dtype=np.int8)
        out = {"obs": rows}
        if self.masked:
            out["action_mask"] = mask
        return out, flats

    def joint_observation(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The joint observation of ``{agent_id: observation}`` (what the PettingZoo env gives)
        without stepping this env: agents missing from ``obs`` get zero rows, as agents that
        left. Its ``state`` is the agents' observations side by side for an env without a
        global state, and zeros for one with it (the state is the env's, which one
        observation dict does not hold; the agents act on their own rows, and only
        centralised critics and mixers read the state, in training)."""
        out, flats = self._rows(obs)
        if self.has_state:
            shape = self._state_space.shape
            out["state"] = np.zeros(shape, dtype=np.float32)
        else:
            out["state"] = np.concatenate(flats).astype(np.float32)
        return out

    def agent_actions(self, action: Any, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """The joint ``action`` (one row per agent) as ``{agent_id: env action}`` for
        ``agents`` (default: every agent), as :meth:`step` hands them to the env."""
        act = np.asarray(action)
        if act.shape[:1] != (self.n_agents,):
            raise ValueError(
                f"the joint action has shape {act.shape}; it needs one row per agent "
                f"({self.n_agents})"
            )
        index = {a: i for i, a in enumerate(self.agents)}
        out: dict[str, Any] = {}
        for agent in self.agents if agents is None else agents:
            i = index[agent]
            if self.n_actions:
                out[agent] = np.int64(int(act[i]) + self._action_start)
            else:
                out[agent] = act[i].astype(self._agent_action_space.dtype)
        return out

    def _global_state(self) -> np.ndarray:
        if self.has_state:
            return np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
        return np.concatenate(self._last).astype(np.float32)

    # -- gymnasium's API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        obs, _infos = self.env.reset(seed=seed, options=options)
        live = set(self.env.agents)
        self._alive = np.array([a in live and a in obs for a in self.agents], dtype=bool)
        self._terminated[:] = False
        self._truncated = False
        return self._observe(obs, self._alive), {"agents_alive": self._alive.copy()}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        alive = [a for i, a in enumerate(self.agents) if self._alive[i]]
        actions = self.agent_actions(action, alive)
        obs, rew, term, trunc, _infos = self.env.step(actions)
        agent_rewards = np.array([float(rew.get(a, 0.0)) for a in self.agents], dtype=np.float32)
        live = set(self.env.agents)
        was_alive = self._alive.copy()
        for i, agent in enumerate(self.agents):
            t, u = bool(term.get(agent, False)), bool(trunc.get(agent, False))
            if self._alive[i]:
                self._terminated[i] |= t
                self._truncated |= u
            # live: still listed with an observation (agents may also appear mid-episode)
            self._alive[i] = agent in live and agent in obs and not (t or u)
        # the episode ends when no agent is left: terminated when every agent terminated (or
        # they left without a truncation), truncated when one of them was truncated
        over = not self._alive.any()
        terminated = bool(self._terminated.all()) or (over and not self._truncated)
        truncated = over and self._truncated and not terminated
        info = {"agent_rewards": agent_rewards, "agents_alive": self._alive.copy()}
        # an agent that ended this step shows its last observation (truncations bootstrap on it)
        joint = self._observe(obs, was_alive | self._alive)
        return joint, float(agent_rewards.sum()), terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class JointEnvFactory:
    """Makes a :class:`JointAgentEnv` over the PettingZoo env ``env_id`` (with its
    ``make_kwargs`` and PettingZoo ``wrappers``, innermost first). Plain data, so it pickles
    for subprocess backends."""

    def __init__(
        self,
        env_id: str,
        make_kwargs: Mapping[str, Any] | None = None,
        wrappers: Sequence[Any] = (),
    ) -> None:
        self.env_id = env_id
        self.make_kwargs = dict(make_kwargs or {})
        self.wrappers = list(wrappers)
        self.__qualname__ = f"JointEnvFactory({env_id!r})"  # how errors name this factory

    def __call__(self) -> JointAgentEnv:
        env = multiagent_factory(self.env_id, self.make_kwargs)()
        for wrap in multiagent_wrappers(self.wrappers):
            env = wrap(env)
        return JointAgentEnv(env)
