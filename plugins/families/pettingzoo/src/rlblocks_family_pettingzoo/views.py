"""Trajectory views of the multi-agent collector: each agent's own history, and other agents'
data in the same env episode (:attr:`rlblocks.contracts.ViewRequirement.agents`).

Both are kept by :class:`rlblocks.contracts.ActingViews`, the single-agent machinery, so shifts,
ranges, padding, spaces and Dict observations behave exactly as in single-agent runs:

- **Own history**: one ``ActingViews`` per policy over every agent slot. A slot is to it what an
  env is to a single-agent collector: its history restarts when its agent starts an episode
  (at the env's reset, or when the agent enters later) and grows by one step at the end of
  each of the agent's transitions.
- **Other agents**: one ``ActingViews`` per view over the envs, whose "observation" at an env
  step is the joint row of the view's agents, ``{"value": [n, ...], "present": [n]}``, whose
  "action" is their joint action ``[n, ...]`` and whose "reward" their rewards ``[n]``; an
  agent that does not act at a step has zeros there and ``present`` False. Each row of the
  view then picks the agents it asks for (``"others"``: all but the viewing agent) in
  ``possible_agents`` order.

Views used for training are stored with each step (``view_<name>``, and ``view_<name>_present``
for other agents' views), so a policy learns on what it acted on. Other agents' views for
training only (their action at the same step, their next observation) are built once the env
step is done, one step later than acting can.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts import (
    AGENTS_ALL,
    AGENTS_OTHERS,
    ActingViews,
    ConfigError,
    ViewRequirement,
    acting_requirements,
    copy_history,
    describe_change,
    presence_key,
    stored_key,
)

__all__ = ["MultiAgentViews", "view_agents"]


def view_agents(req: ViewRequirement, viewer: str, agents: Sequence[str]) -> list[int]:
    """Indices into ``agents`` (``possible_agents``, in that order) of the agents whose data a
    view of ``viewer`` reads: every other one for ``"others"``, all for ``"all"``, else those
    matching the view's names or patterns."""
    if req.agents == AGENTS_OTHERS:
        return [i for i, a in enumerate(agents) if a != viewer]
    if req.agents == AGENTS_ALL:
        return list(range(len(agents)))
    assert isinstance(req.agents, tuple)
    unmatched = [p for p in req.agents if not any(fnmatch.fnmatchcase(a, p) for a in agents)]
    if unmatched:
        raise ConfigError(
            f"ViewRequirement.agents: {unmatched} match no agent of {list(agents)}; name "
            "agents of the env (or patterns such as 'adversary_*')"
        )
    return [i for i, a in enumerate(agents) if any(fnmatch.fnmatchcase(a, p) for p in req.agents)]


def _stacked(space: gym.Space, n: int) -> gym.Space:
    """``space`` with a leading axis of ``n`` agents (Dicts per key): the joint row's space."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: _stacked(sub, n) for k, sub in space.items()})
    if isinstance(space, gym.spaces.Tuple) or space.shape is None or space.dtype is None:
        raise ConfigError(
            f"other agents' views need Box, discrete or Dict spaces (of those), got {space}; "
            "declare ViewRequirement.space, or view a key of a Dict observation ('obs.KEY')"
        )
    dtype = np.dtype(space.dtype)
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    elif dtype.kind == "b":
        low, high = 0, 1
    else:
        info = np.iinfo(dtype)
        low, high = info.min, info.max
    return gym.spaces.Box(low, high, (n, *space.shape), dtype)


def _zeros(space: gym.Space, lead: tuple[int, ...]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _zeros(sub, lead) for k, sub in space.items()}
    return np.zeros((*lead, *space.shape), dtype=space.dtype)


def _put(tree: Any, index: tuple[int, int], value: Any) -> None:
    if isinstance(tree, dict):
        for key, sub in tree.items():
            _put(sub, index, value[key])
    else:
        tree[index] = value


def _pick(value: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        value = value[part]
    return value


def _leaves(tree: Any, fn: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _leaves(v, fn) for k, v in tree.items()}
    return fn(tree)


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return tree[i]


class _AgentsView:
    """One view of other agents: its joint history over the envs (an ``ActingViews``) and, per
    viewing agent, which agents of the joint row it reads."""

    def __init__(
        self, name: str, req: ViewRequirement, envs: Any, viewers: Sequence[str], policy: str
    ) -> None:
        self.name, self.req = name, req
        agents = list(envs.agents)
        members = {v: view_agents(req, v, agents) for v in viewers}
        union = sorted(set().union(*members.values()))
        counts = {len(m) for m in members.values()}
        if not union or 0 in counts:
            raise ConfigError(
                f"view {name!r} of policy {policy!r}: agents={req.agents!r} names no agent for "
                f"{[v for v, m in members.items() if not m]} among {agents}"
            )
        if len(counts) > 1:
            raise ConfigError(
                f"view {name!r} of policy {policy!r}: agents={req.agents!r} gives its agents "
                "different numbers of agents to view; name the agents explicitly"
            )
        #: the joint row's agents (indices into possible_agents), and each one's position there
        self.union = np.asarray(union, dtype=np.int64)
        pos = {a: k for k, a in enumerate(union)}
        #: per viewing agent (index into possible_agents): positions in the joint row it reads
        self.pick = np.zeros((len(agents), next(iter(counts))), dtype=np.int64)
        for v, m in members.items():
            self.pick[agents.index(v)] = [pos[a] for a in m]
        column = req.column(name)
        self.top, _, self.path = column.partition(".")
        spaces = {
            j: req.column_space(
                name, envs.observation_space(agents[j]), envs.action_space(agents[j])
            )
            for j in union
        }
        if len({repr(s) for s in spaces.values()}) > 1:
            raise ConfigError(
                f"view {name!r} of policy {policy!r}: the agents "
                f"{[agents[j] for j in union]} have different {self.top} spaces, which cannot "
                "be stacked; view each kind of agent in its own view (agents=['NAME_*'])"
            )
        space = spaces[union[0]]
        if space is None:
            raise ConfigError(
                f"view {name!r}: {column!r} has no space; declare ViewRequirement.space"
            )
        n = len(union)
        self.space = _stacked(space, n)
        self.present_space = gym.spaces.Box(0, 1, (n,), np.bool_)
        #: acting views are built at the step they act in; training-only ones when the env step
        #: is done (the history is then one step further, hence one shift less)
        self.late = not req.used_for_acting
        shift: Any = req.shift
        if self.late:
            shifted = [s - 1 for s in req.offsets]
            shift = shifted if req.ranged else shifted[0]
        joint_column = "obs.value" if self.top == "obs" else self.top
        self.requirements = {
            name: ViewRequirement(joint_column, shift=shift, space=self.space),
            presence_key(name): ViewRequirement(
                "obs.present", shift=shift, space=self.present_space
            ),
        }
        obs_space = gym.spaces.Dict(
            {"present": self.present_space, **({"value": self.space} if self.top == "obs" else {})}
        )
        self.views = ActingViews(
            self.requirements, envs.num_envs, obs_space, self.space if self.top == "act" else None
        )
        self.stored = req.used_for_training

    def joint_obs(self, envs_of: Sequence[int], rows: Mapping[int, list[tuple[int, Any]]]) -> Any:
        """The joint "observation" of envs ``envs_of``: ``rows[e]`` lists (agent index, obs) of
        the agents that act in env ``e`` now."""
        value = _zeros(self.space, (len(envs_of),)) if self.top == "obs" else None
        present = np.zeros((len(envs_of), len(self.union)), dtype=bool)
        where = {int(a): k for k, a in enumerate(self.union)}
        for i, e in enumerate(envs_of):
            for agent, obs in rows.get(e, ()):
                k = where.get(agent)
                if k is None:
                    continue
                present[i, k] = True
                if value is not None:
                    _put(value, (i, k), _pick(obs, self.path))
        return {"present": present, **({"value": value} if value is not None else {})}

    def joint_step(
        self, envs_of: Sequence[int], acted: Mapping[int, list[tuple[int, Any, float]]]
    ) -> tuple[Any, np.ndarray]:
        """Joint action and reward rows of envs ``envs_of`` (zeros for agents that did not act):
        ``acted[e]`` lists (agent index, action, reward)."""
        act = _zeros(self.space, (len(envs_of),)) if self.top == "act" else None
        dtype = self.space.dtype if self.top == "rew" else np.float32
        rew = np.zeros((len(envs_of), len(self.union)), dtype=dtype)
        where = {int(a): k for k, a in enumerate(self.union)}
        for i, e in enumerate(envs_of):
            for agent, a, r in acted.get(e, ()):
                k = where.get(agent)
                if k is None:
                    continue
                rew[i, k] = r
                if act is not None:
                    _put(act, (i, k), a)
        return act, rew

    def build(self, env_ids: np.ndarray, viewers: np.ndarray) -> dict[str, Any]:
        """This view and its presence mask for rows in envs ``env_ids`` seen by the agents
        ``viewers``: ``[B, k, ...]`` (``[B, k, T, ...]`` for a list or range of shifts)."""
        built = self.views.build(env_ids)
        idx = self.pick[viewers]
        rows = np.arange(len(env_ids))[:, None]
        ranged = self.req.ranged

        def pick(leaf: np.ndarray) -> np.ndarray:
            if ranged:  # [B, T, n, ...] -> [B, n, T, ...]
                leaf = np.moveaxis(leaf, 2, 1)
            return leaf[rows, idx]

        return {key: _leaves(value, pick) for key, value in built.items()}


class MultiAgentViews:
    """The trajectory views of every policy of a multi-agent collector (see the module
    docstring). The collector calls :meth:`reset` with the first ready slots, :meth:`build` per
    policy before acting, :meth:`after_step` once the envs stepped, and writes
    :meth:`stored_rows` with each transition."""

    def __init__(
        self,
        envs: Any,
        policies: Mapping[str, Any],
        policy_of: Mapping[str, str],
    ) -> None:
        self.envs = envs
        agents = list(envs.agents)
        #: the policy of each slot, by name
        self.slot_policy = np.array([policy_of[agents[a]] for a in envs.slot_agent], dtype=object)
        #: per policy: its acting views when built (a later change is refused, see check)
        self.acting: dict[str, dict[str, ViewRequirement]] = {}
        self.own: dict[str, ActingViews] = {}
        self.others: dict[str, list[_AgentsView]] = {}
        for name, policy in policies.items():
            reqs = dict(getattr(policy, "view_requirements", None) or {})
            viewers = [a for a in agents if policy_of[a] == name]
            if not viewers:
                continue
            self.acting[name] = acting_requirements(reqs)
            if not reqs:
                continue
            own = {k: r for k, r in reqs.items() if r.agents is None}
            first = viewers[0]
            views = ActingViews(
                own, envs.num_slots, envs.observation_space(first), envs.action_space(first)
            )
            if views:
                self.own[name] = views
            for key, req in reqs.items():
                if req.agents is None or not (req.used_for_acting or req.used_for_training):
                    continue
                problem = req.agent_view_problem(key)
                if problem:
                    raise ConfigError(problem)
                if envs.aec:
                    raise ConfigError(
                        f"view {key!r} of policy {name!r} reads other agents' data, which needs "
                        "a parallel env (agents acting together); this is an AEC env: view the "
                        "agent's own history, or use the env's parallel API"
                    )
                if presence_key(key) in reqs:
                    raise ConfigError(
                        f"policy {name!r} declares a view {presence_key(key)!r}, the name of "
                        f"the presence mask of its view {key!r}; rename one of them"
                    )
                self.others.setdefault(name, []).append(_AgentsView(key, req, envs, viewers, name))
        n = envs.num_slots
        #: the views each slot acted on, to store with its transition (by buffer key)
        self._stored: list[dict[str, Any]] = [{} for _ in range(n)]
        #: slots whose agent is in an episode (its own history is running)
        self.in_episode = np.zeros(n, dtype=bool)

    def __bool__(self) -> bool:
        return bool(self.own or self.others)

    def check(self, policies: Mapping[str, Any]) -> None:
        """Refuse policies whose acting views changed since these histories were made."""
        for name, before in self.acting.items():
            now = acting_requirements(getattr(policies[name], "view_requirements", None) or {})
            if now != before:
                raise ConfigError(
                    f"policy {name!r}: its acting views changed after the collector was built "
                    f"({describe_change(before, now)}); set view_requirements before building "
                    "the collector (views for training only may change at any time)"
                )

    # -- episodes -----------------------------------------------------------------------------
    def reset(self, ready: Sequence[int], ready_obs: Sequence[Any]) -> None:
        """Every env starts an episode: ``ready`` slots act first, observing ``ready_obs``."""
        self.in_episode[:] = False
        for slot_rows in self._stored:
            slot_rows.clear()
        self._begin_envs(list(range(self.envs.num_envs)), ready, ready_obs)

    def _begin_envs(
        self, envs_of: list[int], ready: Sequence[int], ready_obs: Sequence[Any]
    ) -> None:
        if not envs_of:
            return
        rows = self._rows_by_env(ready, ready_obs, set(envs_of))
        ids = np.asarray(envs_of, dtype=np.int64)
        for views in self.others.values():
            for view in views:
                view.views.begin_episode(ids, view.joint_obs(envs_of, rows))

    def _rows_by_env(
        self, slots: Sequence[int], values: Sequence[Any], only: set[int] | None = None
    ) -> dict[int, list[tuple[int, Any]]]:
        rows: dict[int, list[tuple[int, Any]]] = {}
        for s, v in zip(slots, values):
            e = int(self.envs.slot_env[s])
            if only is None or e in only:
                rows.setdefault(e, []).append((int(self.envs.slot_agent[s]), v))
        return rows

    # -- acting -------------------------------------------------------------------------------
    def build(self, name: str, slots: np.ndarray, obs: Any) -> dict[str, Any]:
        """The acting views of policy ``name`` for its ready ``slots`` (observing ``obs``, the
        stacked observations); starts the own history of slots whose agent starts an episode,
        and remembers what each slot will store with its transition."""
        out: dict[str, Any] = {}
        own = self.own.get(name)
        if own is not None:
            fresh = ~self.in_episode[slots]
            if fresh.any():
                own.begin_episode(slots[fresh], _leaves(obs, lambda x: np.asarray(x)[fresh]))
            views = own.build(slots)
            out.update(views)
            stored = own.for_buffer(views)
        else:
            stored = {}
        self.in_episode[slots] = True
        env_ids = self.envs.slot_env[slots]
        viewers = self.envs.slot_agent[slots]
        for view in self.others.get(name, ()):
            if view.late:
                continue
            views = view.build(env_ids, viewers)
            out.update(views)
            if view.stored:
                stored.update({stored_key(k): v for k, v in views.items()})
        for j, s in enumerate(slots.tolist()):
            self._stored[s] = {k: _row(v, j) for k, v in stored.items()}
        return out

    def stored_rows(self, slots: Sequence[int]) -> dict[str, Any]:
        """What ``slots`` store with their transitions: ``{buffer key: [rows]}``."""
        first = self._stored[slots[0]]
        return {key: [self._stored[s][key] for s in slots] for key in first}

    # -- after the env step ------------------------------------------------------------------
    def after_step(self, acted: np.ndarray, act: Sequence[Any], res: Any) -> None:
        """Advance every history by the step the ``acted`` slots took (their stored actions
        ``act[slot]``; ``res``: the env's answer), build the training-only views of other
        agents for the transitions that ended, and start the episodes that begin."""
        envs = self.envs
        ids = np.asarray(res.ids, dtype=np.int64)
        ended = set(int(e) for e in res.ended_envs)
        if self.others and len(ids):
            stepped = sorted({int(e) for e in envs.slot_env[acted]})
            rew_of = dict(zip(ids.tolist(), res.rew))
            by_env: dict[int, list[tuple[int, Any, float]]] = {}
            for s in acted.tolist():
                by_env.setdefault(int(envs.slot_env[s]), []).append(
                    (int(envs.slot_agent[s]), act[s], float(rew_of.get(s, 0.0)))
                )
            # who acts at the next step of the same episode (none where the episode ended)
            nxt = [
                (s, o)
                for s, o in zip(res.ready, res.ready_obs)
                if int(envs.slot_env[s]) not in ended
            ]
            rows = self._rows_by_env([s for s, _ in nxt], [o for _, o in nxt])
            step_ids = np.asarray(stepped, dtype=np.int64)
            for name, views in self.others.items():
                mine = ids[self.slot_policy[ids] == name] if views else ids[:0]
                for view in views:
                    joint_act, joint_rew = view.joint_step(stepped, by_env)
                    view.views.record(step_ids, joint_act, joint_rew, view.joint_obs(stepped, rows))
                    if view.late and view.stored and len(mine):
                        built = view.build(envs.slot_env[mine], envs.slot_agent[mine])
                        for j, s in enumerate(mine.tolist()):
                            self._stored[s].update(
                                {stored_key(k): _row(v, j) for k, v in built.items()}
                            )
        if len(ids):
            for name, own in self.own.items():
                mine = np.flatnonzero(self.slot_policy[ids] == name)
                if not len(mine):
                    continue
                slots = ids[mine]
                obs_next = _stack_rows([res.obs_next[r] for r in mine.tolist()])
                rew = np.asarray(res.rew, dtype=np.float64)[mine]
                own.record(slots, np.stack([np.asarray(act[s]) for s in slots]), rew, obs_next)
            done = np.asarray(res.terminated, dtype=bool) | np.asarray(res.truncated, dtype=bool)
            self.in_episode[ids[done]] = False
        if ended:
            for e in ended:
                self.in_episode[envs.slot_env == e] = False
            self._begin_envs(sorted(ended), res.ready, res.ready_obs)

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "own": {n: dict(v.history) for n, v in self.own.items()},
            "others": {
                n: {view.name: dict(view.views.history) for view in views}
                for n, views in self.others.items()
            },
            "in_episode": self.in_episode.copy(),
            "stored": self._stored,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for n, v in self.own.items():
            for column, hist in v.history.items():
                copy_history(hist, state["own"][n][column])
        for n, views in self.others.items():
            for view in views:
                for column, hist in view.views.history.items():
                    copy_history(hist, state["others"][n][view.name][column])
        self.in_episode[:] = state["in_episode"]
        self._stored = [dict(rows) for rows in state["stored"]]


def _stack_rows(rows: list[Any]) -> Any:
    first = rows[0]
    if isinstance(first, dict):
        return {k: _stack_rows([r[k] for r in rows]) for k in first}
    return np.stack([np.asarray(r) for r in rows])
