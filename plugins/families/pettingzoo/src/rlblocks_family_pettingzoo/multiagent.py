"""Many agents: PettingZoo environments as agent slots, and the collector that drives them.

A :class:`MultiAgentVectorEnv` runs ``N`` PettingZoo environments (parallel or AEC API) in this
process. Every (env, agent) pair is a *slot*: slot ``e * A + i`` is agent ``possible_agents[i]``
of env ``e``. To the buffers a slot is what an env is in the single-agent case: it has its own
chain of steps (``prev``/``next`` links, episode starts and ends), so return math, GAE and n-step
targets work per agent unchanged; each stored step also carries an ``agent`` column (the
agent's index in ``possible_agents``).

Agents appear and disappear: a slot acts only while its agent is live. In a parallel env every
live agent acts each env step; in an AEC env only the selected agent does, and its transition
ends at its next turn (its reward is everything it received in between, PettingZoo's
cumulative reward). An agent's episode ends at its own termination or truncation; the env's
episode ends when no agent is left, and the env is then reset and its agents act again.

The :class:`MultiAgentCollector` maps each agent to a policy by name (one shared policy - the
parameter sharing of IPPO/MAPPO - or one per agent or group), batches the ready slots of each
policy into one forward pass, and writes each policy's transitions into that policy's buffer.
It counts ``env_steps`` (one per env ``step`` call, any number of agents) or ``agent_steps``
(one per agent transition), RLlib's ``count_steps_by``. A policy's trajectory views are built
per slot (the agent's own history) and, with ``ViewRequirement.agents``, over the other agents
of the same env episode (:mod:`rlblocks_family_pettingzoo.views`).
"""

from __future__ import annotations

import fnmatch
import importlib
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rlblocks.collect import (
    CollectStats,
    reset_state_rows,
    rows_like_state,
    to_numpy,
    to_numpy_tree,
)
from rlblocks.contracts import (
    Batch,
    ConfigError,
    action_mask_of,
    put_rows,
    random_legal_actions,
    take_rows,
)
from rlblocks.plugins import import_entry
from rlblocks.run import option
from rlblocks_family_pettingzoo.constructors import CONSTRUCTORS
from rlblocks_family_pettingzoo.snapshot import NotSnapshottable, restore_object, snapshot_object
from rlblocks_family_pettingzoo.views import MultiAgentViews

COUNT_STEPS_BY = ("env_steps", "agent_steps")
EPISODE_RETURNS = ("mean", "sum")


def is_aec(env: Any) -> bool:
    """Whether ``env`` has PettingZoo's AEC API (one agent acts at a time)."""
    return callable(getattr(env, "last", None)) and callable(getattr(env, "observe", None))


class MultiAgentStep:
    """What one :meth:`MultiAgentVectorEnv.step` gave back.

    ``ids`` / ``obs_next`` / ``rew`` / ``terminated`` / ``truncated``: the transitions that ended
    (one per slot; with AEC envs a transition ends at the agent's next turn, so these need not be
    the slots that just acted). ``ready`` / ``ready_obs``: the slots that act next and what they
    observe. ``ended_envs``: envs whose episode ended (and were reset). ``env_steps``: env
    ``step`` calls made.
    """

    __slots__ = (
        "ended_envs", "env_steps", "ids", "obs_next", "ready", "ready_obs", "ready_state", "rew",
        "state_next", "terminated", "truncated",
    )  # fmt: skip

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.obs_next: list[Any] = []
        self.rew: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.ready: list[int] = []
        self.ready_obs: list[Any] = []
        self.ended_envs: list[int] = []
        self.env_steps = 0
        #: with ``track_state``: the env's global state at each transition's end / at acting
        self.state_next: list[Any] = []
        self.ready_state: list[Any] = []

    def done(
        self, slot: int, obs: Any, rew: float, term: bool, trunc: bool, state: Any = None
    ) -> None:
        self.ids.append(slot)
        self.obs_next.append(obs)
        self.rew.append(float(rew))
        self.terminated.append(bool(term))
        self.truncated.append(bool(trunc))
        self.state_next.append(state)

    def act(self, slot: int, obs: Any, state: Any = None) -> None:
        self.ready.append(slot)
        self.ready_obs.append(obs)
        self.ready_state.append(state)


class MultiAgentVectorEnv:
    """``N`` PettingZoo envs (all parallel or all AEC, the same agents) stepped in this process,
    seen as ``N * len(possible_agents)`` agent slots (see the module docstring)."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]]) -> None:
        if not env_fns:
            raise ValueError("MultiAgentVectorEnv needs at least one env factory")
        self.envs = [fn() for fn in env_fns]
        first = self.envs[0]
        if not hasattr(first, "possible_agents"):
            raise ConfigError(
                f"{type(first).__name__} is not a PettingZoo env (no possible_agents); "
                "multi-agent training takes PettingZoo ParallelEnv or AECEnv instances"
            )
        self.agents: list[str] = list(first.possible_agents)
        for env in self.envs[1:]:
            if list(env.possible_agents) != self.agents:
                raise ConfigError("every env of a MultiAgentVectorEnv must have the same agents")
        self.aec = is_aec(first)
        if any(is_aec(e) != self.aec for e in self.envs):
            raise ConfigError("mix of AEC and parallel envs: use one API for all")
        self.num_agents = len(self.agents)
        self.num_envs = len(self.envs)
        self.num_slots = self.num_envs * self.num_agents
        self.agent_index = {a: i for i, a in enumerate(self.agents)}
        #: agent index of each slot, and env index of each slot
        self.slot_agent = np.tile(np.arange(self.num_agents), self.num_envs)
        self.slot_env = np.repeat(np.arange(self.num_envs), self.num_agents)
        self._pending = np.zeros(self.num_slots, dtype=bool)  # AEC: acted, transition open
        self._live = np.zeros(self.num_slots, dtype=bool)  # agent in its episode
        self._obs: list[Any] = [None] * self.num_slots
        self._waiting: list[list[int]] = [[] for _ in range(self.num_envs)]  # parallel: to act
        #: record the envs' global state (``env.state()``) with every transition (MAPPO)
        self.track_state = False

    @property
    def state_space(self) -> gym.Space | None:
        """The envs' global state space (PettingZoo's ``state_space``), None without one."""
        return getattr(self.envs[0], "state_space", None)

    def _state(self, e: int) -> Any:
        return np.asarray(self.envs[e].state()) if self.track_state else None

    def observation_space(self, agent: str) -> gym.Space:
        return self.envs[0].observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self.envs[0].action_space(agent)

    def slot(self, env: int, agent: str) -> int:
        return env * self.num_agents + self.agent_index[agent]

    def __len__(self) -> int:
        return self.num_slots

    # -- resetting ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> MultiAgentStep:
        """Reset every env (env ``e`` with ``seed + e``); returns the slots that act first."""
        out = MultiAgentStep()
        self._pending[:] = False
        self._live[:] = False
        for e in range(self.num_envs):
            self._reset_env(e, None if seed is None else seed + e, out)
        return out

    def _reset_env(self, e: int, seed: int | None, out: MultiAgentStep) -> None:
        env = self.envs[e]
        lo = e * self.num_agents
        self._pending[lo : lo + self.num_agents] = False
        self._live[lo : lo + self.num_agents] = False
        if self.aec:
            env.reset(seed=seed)
            self._advance_aec(e, out)
            return
        obs, _infos = env.reset(seed=seed)
        self._waiting[e] = []
        state = self._state(e)
        for agent in env.agents:
            s = self.slot(e, agent)
            self._live[s] = True
            self._obs[s] = obs[agent]
            self._waiting[e].append(s)
            out.act(s, obs[agent], state)
        if not self._waiting[e]:
            raise RuntimeError(f"env {e} has no agents right after reset")

    # -- stepping -----------------------------------------------------------------------------
    def step(self, ids: Sequence[int] | np.ndarray, actions: Sequence[Any]) -> MultiAgentStep:
        """Act for the ready slots ``ids`` (every slot :meth:`reset` or the previous step
        returned as ready, each exactly once) and step the envs."""
        out = MultiAgentStep()
        by_env: dict[int, list[tuple[int, Any]]] = {}
        for s, a in zip(np.asarray(ids).tolist(), actions):
            by_env.setdefault(int(self.slot_env[s]), []).append((s, a))
        for e, acts in by_env.items():
            if self.aec:
                self._step_aec(e, acts, out)
            else:
                self._step_parallel(e, acts, out)
        return out

    def _step_parallel(self, e: int, acts: list[tuple[int, Any]], out: MultiAgentStep) -> None:
        env = self.envs[e]
        given = {s for s, _ in acts}
        if given != set(self._waiting[e]):
            missing = sorted(set(self._waiting[e]) - given)
            raise ValueError(
                f"parallel env {e} steps all its live agents together; actions missing for "
                f"{[self.agents[self.slot_agent[s]] for s in missing]}"
            )
        action = {self.agents[self.slot_agent[s]]: a for s, a in acts}
        obs, rew, term, trunc, _infos = env.step(action)
        out.env_steps += 1
        state = self._state(e)
        for s, _ in acts:
            agent = self.agents[self.slot_agent[s]]
            t, u = bool(term.get(agent, False)), bool(trunc.get(agent, False))
            o = obs.get(agent, self._obs[s])
            out.done(s, o, rew.get(agent, 0.0), t, u, state)
            self._obs[s] = o
            if t or u:
                self._live[s] = False
        waiting = []
        for agent in env.agents:  # still live, or appearing now
            s = self.slot(e, agent)
            if s in given and not self._live[s]:
                continue  # ended this step (an env that keeps ended agents listed)
            if agent not in obs:
                continue
            self._live[s] = True
            self._obs[s] = obs[agent]
            waiting.append(s)
            out.act(s, obs[agent], state)
        self._waiting[e] = waiting
        if not waiting:
            out.ended_envs.append(e)
            self._reset_env(e, None, out)

    def _step_aec(self, e: int, acts: list[tuple[int, Any]], out: MultiAgentStep) -> None:
        if len(acts) != 1:
            raise ValueError(f"AEC env {e}: one agent acts at a time, got {len(acts)} actions")
        s, a = acts[0]
        env = self.envs[e]
        if self.slot(e, env.agent_selection) != s:
            raise ValueError(f"AEC env {e}: slot {s} acted out of turn")
        env.step(a)
        out.env_steps += 1
        self._pending[s] = True
        self._advance_aec(e, out)

    def _advance_aec(self, e: int, out: MultiAgentStep) -> None:
        """Play the env forward to the next agent that must choose an action: close the
        transitions of agents whose turn comes, step ended agents out, reset an empty env."""
        env = self.envs[e]
        for _ in range(100 * (self.num_agents + 1)):
            if not env.agents:
                out.ended_envs.append(e)
                lo = e * self.num_agents
                self._pending[lo : lo + self.num_agents] = False
                self._live[lo : lo + self.num_agents] = False
                env.reset()
                continue
            agent = env.agent_selection
            s = self.slot(e, agent)
            obs, rew, term, trunc, _info = env.last()
            if self._pending[s]:
                out.done(s, obs, rew, term, trunc, self._state(e))
                self._pending[s] = False
            if term or trunc:
                self._live[s] = False
                env.step(None)  # PettingZoo's way of removing an ended agent
                continue
            self._live[s] = True
            self._obs[s] = obs
            out.act(s, obs, self._state(e))
            return
        raise RuntimeError(f"AEC env {e} selected no agent that can act after many steps")

    def snapshot(self) -> dict[str, Any]:
        """Every env's state and the slots' bookkeeping as plain values (see
        :mod:`rlblocks_family_pettingzoo.snapshot`), so a resumed run continues its episodes;
        ``envs`` is None (and ``why`` says why) when an env holds state that is not plain."""
        try:
            envs = [snapshot_object(env) for env in self.envs]
            obs = snapshot_object(self._obs)
        except NotSnapshottable as exc:
            name = type(self.envs[0]).__name__
            return {"envs": None, "why": f"{name} cannot be snapshotted: {exc}"}
        return {
            "envs": envs,
            "pending": self._pending.copy(),
            "live": self._live.copy(),
            "obs": obs,
            "waiting": [list(w) for w in self._waiting],
            "why": "",
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Put every env back where :meth:`snapshot` found it (the envs must have been reset
        once, so that the objects the snapshot writes into exist)."""
        for env, snap in zip(self.envs, state["envs"], strict=True):
            restore_object(env, snap)
        self._pending[:] = state["pending"]
        self._live[:] = state["live"]
        self._obs = restore_object(list(self._obs), state["obs"])
        self._waiting = [list(w) for w in state["waiting"]]

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __enter__(self) -> MultiAgentVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: packages of published PettingZoo envs, imported from an ``env.id`` without ``trust_imports``
KNOWN_PACKAGES = ("pettingzoo", "mpe2")


def is_multiagent_id(env_id: Any) -> bool:
    """Whether ``env_id`` names a PettingZoo env (``module:parallel_env`` or ``module:env``)."""
    if not isinstance(env_id, str) or ":" not in env_id:
        return False
    return env_id.rpartition(":")[2] in CONSTRUCTORS


def multiagent_factory(
    env_id: str, make_kwargs: Mapping[str, Any] | None = None, trusted: bool = True
) -> Callable[[], Any]:
    """A factory of the PettingZoo env ``env_id`` called with ``make_kwargs``. The module is
    imported (running its code) when it is already imported, from a known package
    (:data:`KNOWN_PACKAGES`) or with ``trusted``."""
    module, _, ctor = env_id.rpartition(":")
    if not (module in sys.modules or module.split(".")[0] in KNOWN_PACKAGES or trusted):
        raise ConfigError(
            f"the env {env_id!r} comes from the module {module!r}, and importing it runs its "
            f"code; import it yourself first, or pass "
            f"{option('trust_imports=True', '--trust-imports')} if you trust this run"
        )
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"env {env_id!r}: cannot import {module!r} ({exc}); multi-agent envs need "
            "PettingZoo and the env's package (from the rlblocks repository, pip install "
            "'./plugins/families/pettingzoo[mpe]' for pettingzoo and mpe2)"
        ) from exc
    fn = getattr(mod, ctor, None)
    if not callable(fn):
        raise ConfigError(f"env {env_id!r}: {module!r} has no {ctor}() constructor")
    kwargs = dict(make_kwargs or {})

    def make() -> Any:
        try:
            return fn(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"env {env_id!r} with env.make_kwargs {kwargs}: {exc}") from exc

    return make


def multiagent_wrappers(items: Sequence[Any]) -> list[Callable[[Any], Any]]:
    """``env.wrappers`` entries (``"module:Class"`` or ``{path, kwargs}``) as PettingZoo env
    wrappers, innermost first."""
    out = []
    for item in items:
        cls, kwargs = import_entry(item, "env.wrappers")

        def wrap(env: Any, cls: Any = cls, kwargs: dict[str, Any] = kwargs) -> Any:
            try:
                return cls(env, **kwargs)
            except Exception as exc:
                raise ConfigError(
                    f"env.wrappers: {cls.__module__}:{cls.__qualname__} with kwargs {kwargs} "
                    f"failed: {exc}"
                ) from exc

        out.append(wrap)
    return out


class SingleAgentParallelEnv:
    """A gymnasium env as a one-agent parallel env (agent ``"agent_0"``) whose global state is
    its flattened observation: multi-agent algorithms (MAPPO) then run on single-agent envs, as
    the conformance kit's probes do."""

    metadata: ClassVar[dict[str, Any]] = {"name": "single_agent_v0"}

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.possible_agents = ["agent_0"]
        self.agents: list[str] = []
        self.state_space = gym.spaces.flatten_space(env.observation_space)
        self._obs: Any = None

    def observation_space(self, agent: str) -> gym.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def state(self) -> np.ndarray:
        return gym.spaces.flatten(self.env.observation_space, self._obs)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._obs, info = self.env.reset(seed=seed, options=options)
        self.agents = ["agent_0"]
        return {"agent_0": self._obs}, {"agent_0": info}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._obs, rew, term, trunc, info = self.env.step(actions["agent_0"])
        if term or trunc:
            self.agents = []
        one = lambda x: {"agent_0": x}  # noqa: E731
        return one(self._obs), one(float(rew)), one(bool(term)), one(bool(trunc)), one(info)

    def close(self) -> None:
        self.env.close()


def make_multiagent_env(
    factory: Callable[[], Any], num_envs: int, wrappers: Sequence[Callable[[Any], Any]] = ()
) -> MultiAgentVectorEnv:
    """``num_envs`` copies of the PettingZoo env ``factory()``, each wrapped by ``wrappers``."""

    def make() -> Any:
        env = factory()
        for w in wrappers:
            env = w(env)
        return env

    return MultiAgentVectorEnv([make] * num_envs)


# -- policies and buffers per agent ---------------------------------------------------------------
def env_name(envs: Any) -> str:
    """The class name of the PettingZoo envs of a multi-agent vector env (in process or not)."""
    name = getattr(envs, "env_name", None)
    return str(name) if name else type(envs.envs[0]).__name__


def render_env(envs: Any, e: int) -> Any:
    """Render env ``e`` of a multi-agent vector env, wherever it steps."""
    remote = getattr(envs, "render_env", None)
    return remote(e) if callable(remote) else envs.envs[e].render()


def _stack(rows: list[Any]) -> Any:
    """Rows (arrays or dict trees of arrays) -> one batch tree."""
    first = rows[0]
    if isinstance(first, dict):
        return {k: _stack([r[k] for r in rows]) for k in first}
    return np.stack([np.asarray(r) for r in rows])


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return tree[i]


class MultiAgentCollector:
    """Collects from a :class:`MultiAgentVectorEnv` with one policy per agent group.

    Args:
        policies: one policy for every agent (parameter sharing), or policies by name.
        envs: the multi-agent vector env.
        buffers: a buffer (with one policy) or buffers by policy name, each made for
            ``envs.num_slots`` envs; None for testing.
        mapping: agent name -> policy name, as a mapping or a function; None: the single
            policy, or the policy named like the agent.
        count_steps_by: ``env_steps`` (one per env step, default) or ``agent_steps`` (one per
            agent transition): what ``n_step`` and the returned ``n_step`` count.
        episode_return: an env episode's return in the stats: the ``mean`` over its agents of
            each agent's return (default), or their ``sum`` (the team's).
    """

    def __init__(
        self,
        policies: Any,
        envs: MultiAgentVectorEnv,
        buffers: Any = None,
        mapping: Mapping[str, str] | Callable[[str], str] | None = None,
        exploration: bool = True,
        seed: int | None = None,
        count_steps_by: str = "env_steps",
        episode_return: str = "mean",
    ) -> None:
        if count_steps_by not in COUNT_STEPS_BY:
            raise ConfigError(
                f"count_steps_by={count_steps_by!r}: use one of {', '.join(COUNT_STEPS_BY)}"
            )
        if episode_return not in EPISODE_RETURNS:
            raise ConfigError(
                f"episode_return={episode_return!r}: use one of {', '.join(EPISODE_RETURNS)}"
            )
        self.envs = envs
        single = not isinstance(policies, Mapping)
        self.policies: dict[str, Any] = {"shared": policies} if single else dict(policies)
        if buffers is None:
            self.buffers: dict[str, Any] = {}
        elif isinstance(buffers, Mapping):
            self.buffers = dict(buffers)
        else:
            if len(self.policies) != 1:
                raise ConfigError("several policies need buffers by policy name")
            self.buffers = {next(iter(self.policies)): buffers}
        unknown = set(self.buffers) - set(self.policies)
        if unknown:
            raise ConfigError(f"buffers for unknown policies {sorted(unknown)}")
        names = list(self.policies)
        policy_of: dict[str, str] = {}
        for agent in envs.agents:
            if single:
                name = names[0]
            elif mapping is None:
                name = agent
            elif isinstance(mapping, Mapping):
                name = mapping.get(agent, "")
            else:
                name = mapping(agent)
            if name not in self.policies:
                raise ConfigError(
                    f"agent {agent!r} maps to policy {name!r}, which is not among "
                    f"{names}; give a mapping from every agent to one of them"
                )
            policy_of[agent] = name
        self.policy_of = policy_of
        self._pidx = {n: i for i, n in enumerate(names)}
        self._names = names
        #: policy index of each slot
        self.slot_policy = np.array(
            [self._pidx[policy_of[envs.agents[a]]] for a in envs.slot_agent], dtype=np.int64
        )
        for name in self.policies:
            agents = [a for a in envs.agents if policy_of[a] == name]
            spaces = {repr(envs.observation_space(a)) for a in agents}
            spaces_a = {repr(envs.action_space(a)) for a in agents}
            if len(spaces) > 1 or len(spaces_a) > 1:
                raise ConfigError(
                    f"policy {name!r} acts for agents {agents} whose observation or action spaces "
                    "differ; give them separate policies in the mapping (or pad their spaces)"
                )
        #: policies with a centralised critic get the env's global state stored with each step
        self._wants_state = {
            n for n, p in self.policies.items() if getattr(p, "needs_global_state", False)
        }
        if self._wants_state:
            if envs.state_space is None:
                raise ConfigError(
                    f"policies {sorted(self._wants_state)} learn from the env's global state, "
                    f"and {env_name(envs)} has no state(); use an env with a "
                    "global state, or an algorithm without a centralised critic (ippo)"
                )
            envs.track_state = True
        #: the policies' trajectory views: own histories and other agents' data (views.py)
        views = MultiAgentViews(envs, self.policies, policy_of)
        self._views: MultiAgentViews | None = views if views else None
        self.policy = policies if single else None
        self.exploration = exploration
        self.count_steps_by = count_steps_by
        self.episode_return = episode_return
        self._rng = np.random.default_rng(seed)
        self._seed = seed
        n = envs.num_slots
        self.num_envs = n  # slots: what buffers and trainers size themselves by
        self._ready: np.ndarray | None = None
        self._ready_obs: list[Any] = []
        self._ready_state: list[Any] = []
        self._obs: list[Any] = [None] * n  # the observation each slot acted on
        self._act: list[Any] = [None] * n
        self._out: list[Any] = [None] * n  # policy output stored with the step
        self._gstate: list[Any] = [None] * n  # the env's global state when the slot acted
        self._state: dict[str, Any] = {}
        self._agent_return = np.zeros(n)
        self._env_return = np.zeros(envs.num_envs)
        self._env_agents = np.zeros(envs.num_envs, dtype=np.int64)  # agents ended this episode
        self._env_len = np.zeros(envs.num_envs, dtype=np.int64)
        #: each env's running episode: the returns of its agents that ended, by agent name
        self._episode_agents: list[dict[str, float]] = [{} for _ in range(envs.num_envs)]
        #: the env episodes the last ``collect`` finished (its ``returns``, in that order): each
        #: one's return of every agent, by agent name (what ``Agent.evaluate`` reports per agent)
        self.last_agent_returns: list[dict[str, float]] = []
        self.total_steps = 0
        self.total_episodes = 0
        self.total_env_steps = 0
        self.total_agent_steps = 0
        self.env_name = env_name(envs)

    # -- resetting and resuming -----------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Reset every env; forget partial episodes and recurrent state."""
        seed = self._seed if seed is None else seed
        for buffer in self.buffers.values():
            cut = getattr(buffer, "truncate_unfinished", None)
            if self._ready is not None and callable(cut):
                cut()
        first = self.envs.reset(seed=seed)
        self._seed = None
        self._ready = np.asarray(first.ready, dtype=np.int64)
        self._ready_obs = first.ready_obs
        self._ready_state = first.ready_state
        if self._views is not None:
            self._views.reset(first.ready, first.ready_obs)
        self._state = {}
        self._agent_return[:] = 0
        self._env_return[:] = 0
        self._env_agents[:] = 0
        self._env_len[:] = 0
        self._episode_agents = [{} for _ in range(self.envs.num_envs)]

    def state_dict(self) -> dict[str, Any]:
        """Counters and the random stream, and where the envs can be snapshotted (in this
        process or in worker processes, :mod:`rlblocks_family_pettingzoo.remote`) the envs'
        snapshots with the episodes in progress, so a resumed run continues them; else ``envs``
        is None and ``why`` says why (a resumed run restarts its episodes)."""
        out: dict[str, Any] = {
            "rng": self._rng.bit_generator.state,
            "total_steps": self.total_steps,
            "total_episodes": self.total_episodes,
            "total_env_steps": self.total_env_steps,
            "total_agent_steps": self.total_agent_steps,
            "envs": None,
            "why": self._why_no_snapshot(),
        }
        if out["why"]:
            return out
        envs = self.envs.snapshot()
        if envs.get("envs") is None:
            out["why"] = str(envs.get("why") or "the envs cannot be snapshotted")
            return out
        out["envs"] = envs
        out["episodes"] = {
            "ready": self._ready,
            "ready_obs": self._ready_obs,
            "ready_state": self._ready_state,
            "obs": self._obs,
            "act": [None if a is None else np.asarray(a) for a in self._act],
            "out": self._out,
            "gstate": self._gstate,
            "agent_return": self._agent_return,
            "env_return": self._env_return,
            "env_agents": self._env_agents,
            "env_len": self._env_len,
            "views": None if self._views is None else self._views.state_dict(),
        }
        return out

    def _why_no_snapshot(self) -> str:
        """Why the envs and episodes cannot be snapshotted now ("" when they can)."""
        if self._ready is None:
            return "no episode in progress"
        if self._state:
            return "recurrent policy state is not snapshotted"
        return ""

    def load_state_dict(self, state: Mapping[str, Any]) -> str:
        self._rng.bit_generator.state = dict(state["rng"])
        for key in ("total_steps", "total_episodes", "total_env_steps", "total_agent_steps"):
            setattr(self, key, int(state.get(key, 0)))
        envs = state.get("envs")
        if envs is not None:
            if self._ready is None:  # the workers' envs must exist and be reset before
                self.envs.reset(seed=None)
            self.envs.restore(envs)
            ep = state["episodes"]
            self._ready = np.asarray(ep["ready"], dtype=np.int64)
            self._ready_obs = list(ep["ready_obs"])
            self._ready_state = list(ep["ready_state"])
            self._obs, self._act = list(ep["obs"]), list(ep["act"])
            self._out, self._gstate = list(ep["out"]), list(ep["gstate"])
            self._agent_return = np.asarray(ep["agent_return"], dtype=np.float64).copy()
            self._env_return = np.asarray(ep["env_return"], dtype=np.float64).copy()
            self._env_agents = np.asarray(ep["env_agents"], dtype=np.int64).copy()
            self._env_len = np.asarray(ep["env_len"], dtype=np.int64).copy()
            if self._views is not None:
                saved = ep.get("views")
                if saved is None:  # saved without views: their histories restart now
                    self._views.reset(self._ready, self._ready_obs)
                else:
                    self._views.load_state_dict(saved)
            self._seed = None
            return ""
        self.restart_episodes(int(self._rng.integers(2**31 - 1)))
        return str(state.get("why", "")) or "PettingZoo envs cannot be snapshotted"

    def restart_episodes(self, seed: int) -> None:
        self._seed = int(seed)
        self._ready = None

    # -- acting -------------------------------------------------------------------------------
    def _random_action(self, slot: int, obs: Any = None) -> Any:
        """A uniformly random action of ``slot``'s agent: a legal one when its observation
        ``obs`` carries an action mask (PettingZoo's ``"action_mask"``)."""
        space = self.envs.action_space(self.envs.agents[self.envs.slot_agent[slot]])
        mask = action_mask_of(obs)
        if mask is not None:
            return random_legal_actions(np.asarray(mask)[None], space, self._rng)[0]
        if isinstance(space, gym.spaces.Discrete):
            return int(space.start + self._rng.integers(space.n))
        if isinstance(space, gym.spaces.Box) and np.all(np.isfinite(space.low)):
            return self._rng.uniform(space.low, space.high).astype(space.dtype)
        return space.sample()

    def _act_all(
        self, ready: np.ndarray, obs: list[Any], random: bool, gstate: list[Any]
    ) -> list[Any]:
        """Actions for the ready slots (one forward pass per policy); remembers what each slot
        acted on, its action and the policy output, for the transition's end."""
        env_acts: list[Any] = [None] * len(ready)
        pol = self.slot_policy[ready]
        for name, pi in self._pidx.items():
            rows = np.flatnonzero(pol == pi)
            if not len(rows):
                continue
            slots = ready[rows]
            policy = self.policies[name]
            o = _stack([obs[r] for r in rows])
            agent = self.envs.slot_agent[slots]
            views = self._views.build(name, slots, o) if self._views is not None else {}
            out_rows: Any = None
            if random:
                env_act = [self._random_action(int(s), obs[r]) for r, s in zip(rows, slots)]
                inv = getattr(policy, "map_action_inverse", None)
                act = inv(np.asarray(env_act)) if callable(inv) else np.asarray(env_act)
            else:
                state = self._state.get(name)
                batch = Batch(obs=o, agent=agent)
                batch.update(views)  # a view named "obs" (a stack of them) replaces it
                result = policy(batch, None if state is None else take_rows(state, slots))
                act = to_numpy(result.act)
                if self.exploration and policy.training:
                    act = policy.exploration_noise(act, result)
                env_act = policy.map_action(act)
                new_state = result.get("state", None)
                if new_state is not None:
                    if state is None:
                        state = self._state[name] = rows_like_state(new_state, self.envs.num_slots)
                    put_rows(state, slots, new_state)
                p_out = result.get("policy", None)
                if p_out is not None:
                    out_rows = to_numpy_tree(p_out)
            act = np.asarray(act)
            for j, (r, s) in enumerate(zip(rows.tolist(), slots.tolist())):
                self._obs[s] = obs[r]
                self._act[s] = act[j]
                self._out[s] = None if out_rows is None else _row(out_rows, j)
                self._gstate[s] = gstate[r]
                env_acts[r] = env_act[j]
        return env_acts

    def _store(self, res: Any) -> None:
        """Write the transitions that ended into their policies' buffers."""
        if not self.buffers or not res.ids:
            return
        ids = np.asarray(res.ids, dtype=np.int64)
        pol = self.slot_policy[ids]
        rew = np.asarray(res.rew, dtype=np.float32)
        term = np.asarray(res.terminated)
        trunc = np.asarray(res.truncated)
        for name, buffer in self.buffers.items():
            rows = np.flatnonzero(pol == self._pidx[name])
            if not len(rows):
                continue
            slots = ids[rows]
            data = {
                "obs": _stack([self._obs[s] for s in slots]),
                "act": np.stack([self._act[s] for s in slots]),
                "rew": rew[rows],
                "terminated": term[rows],
                "truncated": trunc[rows],
                "obs_next": _stack([res.obs_next[r] for r in rows]),
                "agent": self.envs.slot_agent[slots],
            }
            if name in self._wants_state:
                data["global_state"] = np.stack([self._gstate[s] for s in slots])
                data["global_state_next"] = np.stack([res.state_next[r] for r in rows])
            if self._out[slots[0]] is not None:
                data["policy"] = _stack([self._out[s] for s in slots])
            if self._views is not None:  # training reads back what acting saw
                data.update(
                    {k: _stack(v) for k, v in self._views.stored_rows(slots.tolist()).items()}
                )
            buffer.add(data, env_ids=slots)

    # -- the loop -----------------------------------------------------------------------------
    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        random: bool = False,
        render: float | None = None,
        *,
        exact: bool = False,
        fragment: int | None = None,
        complete_episodes: bool = False,
    ) -> CollectStats:
        """Collect at least ``n_step`` steps (counted by ``count_steps_by``; episodes go on
        into the next call) or exactly ``n_episode`` whole env episodes. ``random`` acts
        uniformly at random (warm-up)."""
        if exact or fragment is not None or complete_episodes:
            raise ValueError(
                "the multi-agent collector collects n_step (at least) or n_episode; exact, "
                "fragment and complete_episodes are single-agent batch modes for now"
            )
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step or n_episode")
        if (n_step is not None and n_step <= 0) or (n_episode is not None and n_episode <= 0):
            raise ValueError(f"n_step / n_episode must be positive, got {n_step} / {n_episode}")
        if self._views is not None:
            self._views.check(self.policies)
        start = time.perf_counter()
        if n_episode is not None or self._ready is None:
            self.reset()
        envs = self.envs
        by_agent = self.count_steps_by == "agent_steps"
        steps = episodes = env_steps = agent_steps = 0
        returns: list[float] = []
        lengths: list[int] = []
        agent_returns: list[dict[str, float]] = []
        # n_episode: at most n_episode episodes start (the first one per env), then envs retire
        retired = np.zeros(envs.num_envs, dtype=bool)
        if n_episode is not None and n_episode < envs.num_envs:
            retired[n_episode:] = True
        started = min(n_episode, envs.num_envs) if n_episode is not None else 0
        ready, ready_obs, ready_state = self._ready, self._ready_obs, self._ready_state
        assert ready is not None
        with torch.inference_mode():
            while True:
                if retired.any():
                    keep = ~retired[envs.slot_env[ready]]
                    ready = ready[keep]
                    ready_obs = [o for o, k in zip(ready_obs, keep) if k]
                    ready_state = [o for o, k in zip(ready_state, keep) if k]
                if not len(ready):
                    break
                acts = self._act_all(ready, ready_obs, random, ready_state)
                res = envs.step(ready, acts)
                if render:
                    for e in sorted(set(envs.slot_env[ready].tolist())):
                        render_env(envs, e)
                    time.sleep(render)
                rew = np.asarray(res.rew, dtype=np.float64)
                if not math.isfinite(float(rew.sum())):
                    bad = res.ids[int(np.flatnonzero(~np.isfinite(rew))[0])]
                    raise ValueError(
                        f"agent {envs.agents[envs.slot_agent[bad]]!r} of env "
                        f"{envs.slot_env[bad]} got a NaN or infinite reward; fix or wrap the env"
                    )
                if self._views is not None:  # before _store: it stores views built here
                    self._views.after_step(ready, self._act, res)
                self._store(res)
                ids = np.asarray(res.ids, dtype=np.int64)
                n_trans = len(ids)
                self.total_agent_steps += n_trans
                self.total_env_steps += res.env_steps
                agent_steps += n_trans
                env_steps += res.env_steps
                steps += n_trans if by_agent else res.env_steps
                if n_trans:
                    np.add.at(self._agent_return, ids, rew)
                    np.add.at(self._env_return, envs.slot_env[ids], rew)
                if envs.aec:  # an AEC episode's length counts every agent's turn
                    np.add.at(self._env_len, envs.slot_env[ready], 1)
                else:
                    self._env_len[np.unique(envs.slot_env[ready])] += 1
                ended = np.asarray(res.terminated, dtype=bool) | np.asarray(
                    res.truncated, dtype=bool
                )
                if ended.any():
                    done_slots = ids[ended]
                    for slot in done_slots.tolist():
                        self._episode_agents[envs.slot_env[slot]][
                            envs.agents[envs.slot_agent[slot]]
                        ] = float(self._agent_return[slot])
                    np.add.at(self._env_agents, envs.slot_env[done_slots], 1)
                    self._agent_return[done_slots] = 0
                    for state in self._state.values():
                        reset_state_rows(state, done_slots)
                for e in res.ended_envs:
                    ended_agents, self._episode_agents[e] = self._episode_agents[e], {}
                    if retired[e]:
                        continue
                    agent_returns.append(ended_agents)
                    ret = self._env_return[e]
                    if self.episode_return == "mean":
                        ret = ret / max(int(self._env_agents[e]), 1)
                    returns.append(float(ret))
                    lengths.append(int(self._env_len[e]))
                    episodes += 1
                    self._env_return[e] = 0
                    self._env_agents[e] = 0
                    self._env_len[e] = 0
                    if n_episode is not None:
                        if started >= n_episode:
                            retired[e] = True
                        else:
                            started += 1
                ready = np.asarray(res.ready, dtype=np.int64)
                ready_obs, ready_state = res.ready_obs, res.ready_state
                if n_step is not None and steps >= n_step:
                    break
                if n_episode is not None and episodes >= n_episode:
                    break
        self._ready, self._ready_obs, self._ready_state = ready, ready_obs, ready_state
        self.last_agent_returns = agent_returns
        if n_episode is not None:
            self._ready = None  # envs that retired hold stale episodes: start afresh next time
        self.total_steps += steps
        self.total_episodes += episodes
        return CollectStats(
            n_step=steps,
            n_episode=episodes,
            returns=np.asarray(returns, dtype=np.float64),
            lengths=np.asarray(lengths, dtype=np.int64),
            seconds=time.perf_counter() - start,
            env_steps=env_steps,
            agent_steps=agent_steps,
        )


def group_agents(agents: Sequence[str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Agent -> policy name from ``env.policy_mapping`` (names or fnmatch patterns, the first
    match wins); every agent must match one."""
    out: dict[str, str] = {}
    for agent in agents:
        for pattern, name in mapping.items():
            if fnmatch.fnmatchcase(agent, pattern):
                out[agent] = name
                break
    missing = [a for a in agents if a not in out]
    if missing:
        raise ConfigError(
            f"$.env.policy_mapping: agents {missing} match no entry; map every agent of "
            f"{list(agents)} (a pattern such as '*' catches the rest)"
        )
    return out


# -- several policies under one trainer -----------------------------------------------------------
class BufferGroup(dict):
    """Buffers by policy name, seen by a trainer as one buffer (sizes, length, reset)."""

    @property
    def maxsize(self) -> int:
        """The smallest member's size: no member may overflow within one collect."""
        return min(int(b.maxsize) for b in self.values())

    def __len__(self) -> int:  # type: ignore[override]
        return sum(len(b) for b in self.values())

    def reset(self, keep_statistics: bool = False) -> None:
        for b in self.values():
            try:
                b.reset(keep_statistics=keep_statistics)
            except TypeError:  # a buffer whose reset takes no arguments
                b.reset()


class PolicyGroup(dict):
    """Policies by name, seen by a trainer as one policy: ``update`` updates each on its own
    buffer of a :class:`BufferGroup` and reports ``<name>/<statistic>``; modes, env steps,
    schedules and weights go to every member. The multi-agent collector takes it as its
    policies (a mapping)."""

    @property
    def training(self) -> bool:
        return all(p.training for p in self.values())

    def train(self, mode: bool = True) -> PolicyGroup:
        for p in self.values():
            p.train(mode)
        return self

    def eval(self) -> PolicyGroup:
        return self.train(False)

    def set_env_step(self, env_step: int) -> None:
        for p in self.values():
            p.set_env_step(env_step)

    def seed(self, seed: int | None) -> None:
        for i, p in enumerate(self.values()):
            p.seed(None if seed is None else seed + 7919 * i)

    def extra_state(self) -> dict[str, Any]:
        return {n: p.extra_state() for n, p in self.items()}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        for n, p in self.items():
            p.load_extra_state(state.get(n, {}))

    def schedule_stats(self) -> dict[str, float]:
        return {f"{n}/{k}": v for n, p in self.items() for k, v in p.schedule_stats().items()}

    def update(self, sample_size: int, buffer: Any, **kwargs: Any) -> dict[str, float]:
        if not isinstance(buffer, Mapping):
            raise TypeError("a PolicyGroup learns from a BufferGroup (buffers by policy name)")
        out: dict[str, float] = {}
        steps = 0
        for name, policy in self.items():
            stats = dict(policy.update(sample_size, buffer[name], **kwargs))
            steps = max(steps, int(stats.pop("gradient_steps", 1)))
            out.update({f"{name}/{k}": v for k, v in stats.items()})
        out["gradient_steps"] = steps
        return out

    def state_dict(self) -> dict[str, Any]:
        return {n: p.state_dict() for n, p in self.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for n, p in self.items():
            p.load_state_dict(state[n])
