"""PettingZoo envs stepped in worker processes: the multi-agent side of the subproc backend.

Each PettingZoo env lives in a worker process of the named backend (``subproc``), wrapped as a
gymnasium env (:class:`AgentSlotsEnv`) that holds a one-env :class:`MultiAgentVectorEnv`: its
``reset``/``step`` return that env's :class:`MultiAgentStep` as the "observation" (an object
leaf, :class:`SlotStepSpace`). So the backend's own machinery carries it unchanged: worker
processes that die with the trainer, fault reports naming the env, ``worker_timeout``,
``restart_failed`` and snapshots. :class:`RemoteMultiAgentVectorEnv` joins the envs' answers
into agent slots (slot ``e * A + i``, as in process) and offers the collector the interface of
:class:`MultiAgentVectorEnv`.

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

from rlblocks.contracts import ConfigError
from rlblocks_family_pettingzoo.multiagent import MultiAgentStep, MultiAgentVectorEnv
from rlblocks_family_pettingzoo.snapshot import NotSnapshottable, restore_object, snapshot_object

#: backends that step PettingZoo envs in worker processes
WORKER_BACKENDS = ("subproc",)


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


class AgentSlotsEnv(gym.Env):
    """One PettingZoo env and its slot bookkeeping as a gymnasium env a worker can step.

    ``step((slots, actions))`` acts for the env's ready slots (numbered ``0 .. A - 1``) and
    returns the :class:`MultiAgentStep` as the observation, reward 0 and never done (agents'
    episodes are inside the payload; the env resets itself when its episode ends)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    observation_space = SlotStepSpace()
    action_space = SlotStepSpace()

    def __init__(self, make: Callable[[], Any]) -> None:
        self.slots = MultiAgentVectorEnv([make])
        env = self.slots.envs[0]
        self.render_mode = getattr(env, "render_mode", None)

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
    ) -> tuple[MultiAgentStep, dict]:
        return self.slots.reset(seed=seed), {}

    def step(self, action: Any) -> tuple[MultiAgentStep, float, bool, bool, dict]:
        ids, acts = action
        return self.slots.step(ids, acts), 0.0, False, False, {}

    def render(self) -> Any:
        return self.slots.envs[0].render()

    def close(self) -> None:
        self.slots.close()

    # the snapshot protocol of rlblocks.collect: plain values of the PettingZoo env's state
    def snapshot_state(self) -> dict[str, Any]:
        v = self.slots
        try:
            env = snapshot_object(v.envs[0])
        except NotSnapshottable as exc:
            return {"why": f"{self.describe['name']} cannot be snapshotted: {exc}"}
        return {
            "env": env,
            "pending": v._pending.copy(),
            "live": v._live.copy(),
            "obs": snapshot_object(v._obs),
            "waiting": [list(w) for w in v._waiting],
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        v = self.slots
        restore_object(v.envs[0], state["env"])
        v._pending[:] = state["pending"]
        v._live[:] = state["live"]
        v._obs = restore_object(list(v._obs), state["obs"])
        v._waiting = [list(w) for w in state["waiting"]]


class AgentSlotsFactory:
    """A picklable factory of :class:`AgentSlotsEnv` around a PettingZoo env factory."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __call__(self) -> AgentSlotsEnv:
        return AgentSlotsEnv(self.make)


class RemoteMultiAgentVectorEnv:
    """``N`` PettingZoo envs in worker processes of a single-agent backend (``venv``, built from
    :class:`AgentSlotsFactory` s), seen as ``N * A`` agent slots like
    :class:`MultiAgentVectorEnv`."""

    def __init__(self, venv: Any) -> None:
        self.venv = venv
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

    @property
    def track_state(self) -> bool:
        return self._track_state

    @track_state.setter
    def track_state(self, value: bool) -> None:
        self._track_state = bool(value)
        self.venv.set_attr("track_state", bool(value))

    @property
    def state_space(self) -> gym.Space | None:
        return self._state_space

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
            self._merge(e, parts[e], out)
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
        for e, part, info in zip(env_ids, parts, infos):
            if "env_worker_restarted" in info:
                self._cut_short(e, out)
                restarted.append(e)
            else:
                self._merge(e, part, out)
        if restarted:  # the new workers' envs start new episodes
            fresh, _ = self.venv.reset(env_ids=restarted)
            for e, part in zip(restarted, fresh):
                self._merge(e, part, out)
        return out

    # -- snapshots ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every env's state (taken in its worker) and the slots' bookkeeping, as plain values;
        ``envs`` is None (and ``why`` says why) when an env cannot be snapshotted."""
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
            f"$.env.backend: {backend!r} cannot step multi-agent (PettingZoo) envs: their "
            "agents' observations come and go with the agents, which a fixed shared-memory "
            "layout cannot hold; use --backend subproc (worker processes) or dummy"
        )
    from rlblocks.run import make_vector_env

    venv = make_vector_env(backend, AgentSlotsFactory(factory), num_envs, **options)
    return RemoteMultiAgentVectorEnv(venv)
