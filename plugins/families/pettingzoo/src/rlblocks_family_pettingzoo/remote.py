"""PettingZoo envs stepped in worker processes: the multi-agent side of the subproc and shmem
backends.

Each PettingZoo env lives in a worker process of the named backend, wrapped as a gymnasium env
(:class:`AgentSlotsEnv`) that holds a one-env :class:`MultiAgentVectorEnv`: its
``reset``/``step`` return that env's :class:`MultiAgentStep` as the "observation". So the
backend's own machinery carries it unchanged: worker processes that die with the trainer, fault
reports naming the env, ``worker_timeout``, ``restart_failed`` and snapshots.
:class:`RemoteMultiAgentVectorEnv` joins the envs' answers into agent slots (slot ``e * A + i``,
as in process) and offers the collector the interface of :class:`MultiAgentVectorEnv`.

How the step travels depends on the backend. ``subproc`` pickles it (an object leaf,
:class:`SlotStepSpace`). ``shmem`` needs arrays of fixed shape that its workers write in place,
so there the step is laid out by :class:`SlotArrays`: per env, one observation entry per agent
(in that agent's own space, so agents with different spaces and Dict observations with an
``action_mask`` fit as they are) for the transitions that ended and for the agents that act
next, and ``[A]`` arrays for rewards, flags, which agents ended a transition or act next (and in
which order), and the global state when it is tracked. An agent absent from a step (not acting,
or gone from ``agents``) has a stale row that nobody reads. The parent rebuilds the same
:class:`MultiAgentStep` from these arrays, so the collector has one code path for every backend.

A worker that dies (``restart_failed``): the backend warns in one line naming the env and
restarts the worker; every agent of that env whose transition was open gets it truncated (its
last observation as the next one), the env's episode ends there, and the env starts a new one,
as a single-agent backend cuts an episode short.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts import ConfigError, SnapshotVectorEnv
from rlblocks_family_pettingzoo.multiagent import MultiAgentStep, MultiAgentVectorEnv
from rlblocks_family_pettingzoo.snapshot import restore_object, snapshot_object

#: backends that step PettingZoo envs in worker processes
WORKER_BACKENDS = ("subproc", "shmem", "ray")
#: of those, the backends whose workers write fixed-shape arrays (see :class:`SlotArrays`)
ARRAY_BACKENDS = ("shmem",)


class SlotStepSpace(gym.Space):
    """The "observation space" of :class:`AgentSlotsEnv`: one :class:`MultiAgentStep` per step,
    an object leaf that backends pass through without stacking it into arrays."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, MultiAgentStep)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotStepSpace)

    def __hash__(self) -> int:
        return hash(SlotStepSpace)

    def __repr__(self) -> str:
        return "SlotStepSpace()"


def _zeros(space: gym.Space) -> Any:
    """A value of ``space``'s shape and dtype (rows no agent wrote); None for a space without a
    fixed shape (``Text``...), which the backend then refuses by name."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _zeros(sub) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_zeros(sub) for sub in space.spaces)
    if space.shape is None:
        return None
    return np.zeros(space.shape, dtype=space.dtype)


def _row(value: Any, r: int) -> Any:
    """Row ``r`` of a (possibly nested Dict/Tuple) observation read from the backend."""
    if isinstance(value, dict):
        return {k: _row(v, r) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_row(v, r) for v in value)
    return value[r]


class SlotArrays:
    """The fixed-shape layout of one env's :class:`MultiAgentStep` (see the module docstring),
    for backends that write observations into arrays in place (``shmem``).

    ``encode`` runs in the worker, ``decode`` in the parent; both know the env's agents and
    spaces (from :attr:`AgentSlotsEnv.describe`)."""

    def __init__(
        self,
        agents: Sequence[str],
        observation_spaces: Mapping[str, gym.Space],
        state_space: gym.Space | None,
    ) -> None:
        self.agents = list(agents)
        n = len(self.agents)
        per_agent = gym.spaces.Dict({a: observation_spaces[a] for a in self.agents})
        rank = gym.spaces.Box(-1, n, (n,), np.int64)
        count = gym.spaces.Box(0, np.iinfo(np.int64).max, (), np.int64)
        fields: dict[str, gym.Space] = {
            "obs_next": per_agent,
            "ready_obs": per_agent,
            "rew": gym.spaces.Box(-np.inf, np.inf, (n,), np.float64),
            "terminated": gym.spaces.MultiBinary(n),
            "truncated": gym.spaces.MultiBinary(n),
            "done_rank": rank,  # k: the agent's transition is the k-th that ended; -1: none
            "ready_rank": rank,  # k: the agent is the k-th to act next; -1: it does not
            "ended": count,  # episodes of the env that ended (and were reset) in this step
            "env_steps": count,
        }
        #: the global state has a row per agent (AEC agents' transitions end at different
        #: moments) when the env declares a Box state space; without one it is not tracked
        self.state_shape: tuple[int, ...] | None = None
        if isinstance(state_space, gym.spaces.Box):
            self.state_shape = tuple(state_space.shape)
            low = np.broadcast_to(state_space.low, state_space.shape)
            high = np.broadcast_to(state_space.high, state_space.shape)
            state = gym.spaces.Box(
                np.stack([low] * n), np.stack([high] * n), dtype=state_space.dtype
            )
            fields["state_next"] = state
            fields["ready_state"] = state
        self.space = gym.spaces.Dict(fields)
        # the last value each agent's rows held: an absent agent's row is written unchanged
        self._rows = {
            key: {a: _zeros(observation_spaces[a]) for a in self.agents}
            for key in ("obs_next", "ready_obs")
        }
        self._states = {
            key: np.zeros(self.space[key].shape, self.space[key].dtype)
            for key in ("state_next", "ready_state")
            if self.state_shape is not None
        }

    def encode(self, step: MultiAgentStep) -> dict[str, Any]:
        """``step`` (of a one-env :class:`MultiAgentVectorEnv`) as arrays of this layout."""
        n = len(self.agents)
        out: dict[str, Any] = {
            "rew": np.zeros(n, np.float64),
            "terminated": np.zeros(n, np.int8),
            "truncated": np.zeros(n, np.int8),
            "done_rank": np.full(n, -1, np.int64),
            "ready_rank": np.full(n, -1, np.int64),
            "ended": np.int64(len(step.ended_envs)),
            "env_steps": np.int64(step.env_steps),
        }
        obs_next, ready_obs = self._rows["obs_next"], self._rows["ready_obs"]
        for k, s in enumerate(step.ids):
            obs_next[self.agents[s]] = step.obs_next[k]
            out["rew"][s] = step.rew[k]
            out["terminated"][s] = step.terminated[k]
            out["truncated"][s] = step.truncated[k]
            out["done_rank"][s] = k
        for k, s in enumerate(step.ready):
            ready_obs[self.agents[s]] = step.ready_obs[k]
            out["ready_rank"][s] = k
        out["obs_next"], out["ready_obs"] = dict(obs_next), dict(ready_obs)
        if self.state_shape is not None:
            for key, ids, states in (
                ("state_next", step.ids, step.state_next),
                ("ready_state", step.ready, step.ready_state),
            ):
                rows = self._states[key]
                for s, state in zip(ids, states):
                    if state is not None:
                        rows[s] = state
                out[key] = rows.copy()
        return out

    def decode(self, arrays: Mapping[str, Any], r: int, track_state: bool) -> MultiAgentStep:
        """Row ``r`` of the arrays the backend returned, as the :class:`MultiAgentStep` the
        worker's env gave (slots numbered within the env, in the same order)."""
        step = MultiAgentStep()
        done_rank, ready_rank = arrays["done_rank"][r], arrays["ready_rank"][r]
        state = track_state and self.state_shape is not None
        for s in np.argsort(done_rank)[np.sort(done_rank) >= 0].tolist():
            step.done(
                s,
                _row(arrays["obs_next"][self.agents[s]], r),
                arrays["rew"][r, s],
                arrays["terminated"][r, s],
                arrays["truncated"][r, s],
                arrays["state_next"][r, s] if state else None,
            )
        for s in np.argsort(ready_rank)[np.sort(ready_rank) >= 0].tolist():
            step.act(
                s,
                _row(arrays["ready_obs"][self.agents[s]], r),
                arrays["ready_state"][r, s] if state else None,
            )
        step.ended_envs = [0] * int(arrays["ended"][r])
        step.env_steps = int(arrays["env_steps"][r])
        return step


class AgentSlotsEnv(gym.Env):
    """One PettingZoo env and its slot bookkeeping as a gymnasium env a worker can step.

    ``step((slots, actions))`` acts for the env's ready slots (numbered ``0 .. A - 1``) and
    returns the :class:`MultiAgentStep` as the observation, reward 0 and never done (agents'
    episodes are inside the payload; the env resets itself when its episode ends). With
    ``arrays`` the step is returned in the fixed-shape layout of :class:`SlotArrays`."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    observation_space = SlotStepSpace()
    action_space = SlotStepSpace()

    def __init__(self, make: Callable[[], Any], arrays: bool = False) -> None:
        self.slots = MultiAgentVectorEnv([make])
        env = self.slots.envs[0]
        self.render_mode = getattr(env, "render_mode", None)
        self.arrays: SlotArrays | None = None
        if arrays:
            v = self.slots
            spaces = {a: v.observation_space(a) for a in v.agents}
            self.arrays = SlotArrays(v.agents, spaces, v.state_space)
            self.observation_space = self.arrays.space

    def _out(self, step: MultiAgentStep) -> Any:
        return step if self.arrays is None else self.arrays.encode(step)

    @property
    def describe(self) -> dict[str, Any]:
        """What the parent needs to know of the env (agents, spaces, API)."""
        v = self.slots
        return {
            "agents": list(v.agents),
            "aec": v.aec,
            "observation_spaces": {a: v.observation_space(a) for a in v.agents},
            "action_spaces": {a: v.action_space(a) for a in v.agents},
            "state_space": v.state_space,
            "name": type(v.envs[0]).__name__,
        }

    @property
    def track_state(self) -> bool:
        return self.slots.track_state

    @track_state.setter
    def track_state(self, value: bool) -> None:
        self.slots.track_state = bool(value)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        return self._out(self.slots.reset(seed=seed)), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        ids, acts = action
        return self._out(self.slots.step(ids, acts)), 0.0, False, False, {}

    def render(self) -> Any:
        return self.slots.envs[0].render()

    def close(self) -> None:
        self.slots.close()

    # the snapshot protocol of rlblocks.collect: plain values of the PettingZoo env's state
    def snapshot_state(self) -> dict[str, Any]:
        """The env's state and its slots' bookkeeping (:meth:`MultiAgentVectorEnv.snapshot`),
        or ``{"why": ...}`` when the env holds state that is not plain values."""
        snap = self.slots.snapshot()
        why = snap.pop("why")
        return {"why": why} if snap["envs"] is None else snap  # "why" only when refused

    def restore_state(self, state: Mapping[str, Any]) -> None:
        if "env" in state:  # the one-env layout of the first release of this module
            state = {**state, "envs": [state["env"]]}
        self.slots.restore(state)


class AgentSlotsFactory:
    """A picklable factory of :class:`AgentSlotsEnv` around a PettingZoo env factory."""

    def __init__(self, make: Callable[[], Any], arrays: bool = False) -> None:
        self.make = make
        self.arrays = arrays

    def __call__(self) -> AgentSlotsEnv:
        return AgentSlotsEnv(self.make, self.arrays)


class RemoteMultiAgentVectorEnv:
    """``N`` PettingZoo envs in worker processes of a single-agent backend (``venv``, built from
    :class:`AgentSlotsFactory` s), seen as ``N * A`` agent slots like
    :class:`MultiAgentVectorEnv`. ``arrays``: the workers return their steps in the layout of
    :class:`SlotArrays` (the factories were built with ``arrays=True``)."""

    def __init__(self, venv: Any, arrays: bool = False, backend: str = "") -> None:
        self.venv = venv
        self.backend = backend
        try:
            info = venv.get_attr("describe", [0])[0]
        except BaseException:
            venv.close()
            raise
        self.agents: list[str] = info["agents"]
        self.aec: bool = info["aec"]
        self._obs_spaces = info["observation_spaces"]
        self._act_spaces = info["action_spaces"]
        self._state_space = info["state_space"]
        self.env_name: str = info["name"]
        self.num_agents = len(self.agents)
        self.num_envs = int(venv.num_envs)
        self.num_slots = self.num_envs * self.num_agents
        self.agent_index = {a: i for i, a in enumerate(self.agents)}
        self.slot_agent = np.tile(np.arange(self.num_agents), self.num_envs)
        self.slot_env = np.repeat(np.arange(self.num_envs), self.num_agents)
        self._open = np.zeros(self.num_slots, dtype=bool)  # acted, transition not ended
        self._last_obs: list[Any] = [None] * self.num_slots
        self._last_state: list[Any] = [None] * self.num_envs
        self._track_state = False
        #: worker restarts seen (each cut one env's episode short)
        self.restarts = 0
        self._arrays = (
            SlotArrays(self.agents, self._obs_spaces, self._state_space) if arrays else None
        )

    @property
    def track_state(self) -> bool:
        return self._track_state

    @track_state.setter
    def track_state(self, value: bool) -> None:
        if value and self._arrays is not None and self._arrays.state_shape is None:
            raise ConfigError(
                f"{self.env_name} declares no Box state_space, so the shmem backend cannot lay "
                "out its global state; use --backend subproc (or dummy) for this env"
            )
        self._track_state = bool(value)
        self.venv.set_attr("track_state", bool(value))

    @property
    def state_space(self) -> gym.Space | None:
        return self._state_space

    def _part(self, parts: Any, r: int) -> MultiAgentStep:
        """Row ``r`` of what the backend returned, as that env's :class:`MultiAgentStep`."""
        if self._arrays is None:
            return parts[r]
        return self._arrays.decode(parts, r, self._track_state)

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self._act_spaces[agent]

    def slot(self, env: int, agent: str) -> int:
        return env * self.num_agents + self.agent_index[agent]

    def __len__(self) -> int:
        return self.num_slots

    def render_env(self, e: int) -> Any:
        return self.venv.render([e])[0]

    # -- joining the envs' answers ---------------------------------------------------------------
    def _merge(self, e: int, part: MultiAgentStep, out: MultiAgentStep) -> None:
        """Add env ``e``'s answer (slots numbered within the env) to ``out``."""
        lo = e * self.num_agents
        for k, s in enumerate(part.ids):
            g = lo + s
            out.done(
                g,
                part.obs_next[k],
                part.rew[k],
                part.terminated[k],
                part.truncated[k],
                part.state_next[k],
            )
            self._open[g] = False
            self._last_obs[g] = part.obs_next[k]
        for k, s in enumerate(part.ready):
            g = lo + s
            out.act(g, part.ready_obs[k], part.ready_state[k])
            self._last_obs[g] = part.ready_obs[k]
            self._last_state[e] = part.ready_state[k]
        if part.ended_envs:
            out.ended_envs.append(e)
        out.env_steps += part.env_steps

    def _cut_short(self, e: int, out: MultiAgentStep) -> None:
        """Env ``e``'s worker was restarted: truncate its open transitions, end its episode."""
        self.restarts += 1
        lo = e * self.num_agents
        for g in range(lo, lo + self.num_agents):
            if self._open[g]:
                out.done(g, self._last_obs[g], 0.0, False, True, self._last_state[e])
                self._open[g] = False
        out.ended_envs.append(e)

    def reset(self, seed: int | None = None) -> MultiAgentStep:
        """Reset every env (env ``e`` with ``seed + e``); returns the slots that act first."""
        out = MultiAgentStep()
        self._open[:] = False
        parts, _infos = self.venv.reset(seed=seed)
        for e in range(self.num_envs):
            self._merge(e, self._part(parts, e), out)
        return out

    def step(self, ids: Sequence[int] | np.ndarray, actions: Sequence[Any]) -> MultiAgentStep:
        """Act for the ready slots ``ids`` and step their envs (in their workers)."""
        by_env: dict[int, tuple[list[int], list[Any]]] = {}
        for s, a in zip(np.asarray(ids).tolist(), actions):
            e = int(self.slot_env[s])
            local, acts = by_env.setdefault(e, ([], []))
            local.append(s - e * self.num_agents)
            acts.append(a)
            self._open[s] = True
        env_ids = sorted(by_env)
        out = MultiAgentStep()
        if not env_ids:
            return out
        parts, _rew, _term, _trunc, infos = self.venv.step(
            [by_env[e] for e in env_ids], env_ids=env_ids
        )
        restarted = []
        for r, (e, info) in enumerate(zip(env_ids, infos)):
            if "env_worker_restarted" in info:
                self._cut_short(e, out)
                restarted.append(e)
            else:
                self._merge(e, self._part(parts, r), out)
        if restarted:  # the new workers' envs start new episodes
            fresh, _ = self.venv.reset(env_ids=restarted)
            for r, e in enumerate(restarted):
                self._merge(e, self._part(fresh, r), out)
        return out

    # -- snapshots ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every env's state (taken in its worker) and the slots' bookkeeping, as plain values;
        ``envs`` is None (and ``why`` says why) when an env cannot be snapshotted."""
        if not isinstance(self.venv, SnapshotVectorEnv):
            return {"envs": None, "why": f"the {self.backend} backend cannot snapshot its envs"}
        entries = self.venv.snapshot()
        missing = [x.get("why") or "no snapshot" for x in entries if x.get("env") is None]
        missing += [
            layer["state"]["why"]
            for x in entries
            if x.get("env") is not None
            for layer in x["env"]["layers"]
            if "why" in layer.get("state", {})
        ]
        if missing:
            return {"envs": None, "why": missing[0]}
        return {
            "envs": entries,
            "open": self._open.copy(),
            "last_obs": snapshot_object(self._last_obs),
            "last_state": snapshot_object(self._last_state),
            "why": "",
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Put every env back where :meth:`snapshot` found it."""
        self.venv.restore(state["envs"])
        self._open[:] = state["open"]
        self._last_obs = restore_object(list(self._last_obs), state["last_obs"])
        self._last_state = restore_object(list(self._last_state), state["last_state"])

    def close(self) -> None:
        self.venv.close()

    def __enter__(self) -> RemoteMultiAgentVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_remote_multiagent_env(
    backend: str, factory: Callable[[], Any], num_envs: int, **options: Any
) -> RemoteMultiAgentVectorEnv:
    """``num_envs`` PettingZoo envs ``factory()`` in worker processes of ``backend``."""
    if backend not in WORKER_BACKENDS:
        raise ConfigError(
            f"$.env.backend: {backend!r} cannot step multi-agent (PettingZoo) envs; use "
            f"--backend {' or '.join(WORKER_BACKENDS)} (worker processes) or dummy"
        )
    from rlblocks.run import make_vector_env

    arrays = backend in ARRAY_BACKENDS
    venv = make_vector_env(backend, AgentSlotsFactory(factory, arrays), num_envs, **options)
    return RemoteMultiAgentVectorEnv(venv, arrays, backend)
