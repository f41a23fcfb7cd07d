"""The Ray vector env: env workers are Ray actors, several envs each, one call per actor.

Env ``i`` lives in actor ``i * num_workers // num_envs`` (contiguous blocks), so stepping all
envs costs one remote call per actor. Every remote call has its own object ref: a reset of some
envs can run while other envs of the same actor have a step in flight (Ray runs one caller's
calls to an actor in order), and ``step_wait`` takes whichever steps are done.

Every wait is bounded: an actor that dies is reported by Ray at once (``RayActorError``), one
that does not answer within ``worker_timeout`` is killed and reported.

Observations come back as the other backends return them: Box observations stacked by each
actor, Dict/Tuple nests stacked here, and leaves that are not fixed-shape arrays (``Text``...)
as 1-D object arrays with one entry per env. An observation whose shape is not the one its
space says is named (env id, leaf path, both shapes) in the words of the other backends.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector.utils import concatenate, create_empty_array
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from rlblocks.collect import empty_observations, has_object_leaves, stack_observations
from rlblocks.contracts import ConfigError, EnvWorkerError, put_rows, take_rows
from rlblocks_env_ray import session
from rlblocks_env_ray.actor import EnvActor
from rlblocks_env_subproc.grouping import WorkerGroups

STEP, RESET, CALL, MAKE = "step", "reset", "call", "make"
_PENDING: Any = object()  # the reply of a call not answered yet (None is a valid payload)


class _Worker:
    """One env actor and the block of envs ``[start, stop)`` it owns."""

    __slots__ = ("actor", "dead", "ids", "index", "pid", "restarts", "start", "stop")

    def __init__(self, index: int, start: int, stop: int) -> None:
        self.index = index
        self.start, self.stop = start, stop
        self.ids = np.arange(start, stop)
        self.actor: Any = None
        self.pid: int | None = None
        self.dead: str | None = None
        self.restarts = 0  # new actors restart_failed started in its place


class _Call:
    """One remote call awaiting its answer."""

    __slots__ = ("args", "ids", "is_async", "method", "ref", "reply", "sent", "synthetic",
                 "worker")

    def __init__(self, worker: _Worker, method: str, ids: np.ndarray, args: tuple) -> None:
        self.worker = worker
        self.method = method
        self.ids = ids  # global env ids, in the order the actor handles them
        self.args = args
        self.ref: Any = None
        self.sent = 0.0
        self.reply: Any = _PENDING  # the payload once answered (async steps wait here)
        self.synthetic: str | None = None  # set when its actor failed and was replaced
        self.is_async = False

    @property
    def what(self) -> str:
        return self.args[0] if self.method == CALL else self.method


def _death_detail(exc: BaseException) -> str:
    """The sentence of a Ray actor error that says why the actor died."""
    text = str(exc)
    for line in text.splitlines():
        if "because" in line:
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


class RayVectorEnv(WorkerGroups):
    """Steps ``len(env_fns)`` envs in ``num_workers`` Ray actors, several envs per actor.

    Same contract as the other backends: no autoreset (the caller resets finished envs with
    ``reset(env_ids)``; stepping one that needs a reset raises EnvWorkerError), results in
    ``env_ids`` order, an int ``seed`` gives env ``i`` the seed ``seed + i``. Asynchronous use:
    ``step_async(actions, env_ids)`` then ``step_wait()`` returning
    ``(env_ids, obs, rew, terminated, truncated, infos)`` for the envs that are ready.
    Runs on the Ray this process is connected to, a local one it starts, or the cluster at
    ``address`` (see :class:`rlblocks_env_ray._spec.RayConfig`). Use it as a context manager or
    call ``close()``: its actors never outlive it (nor this process: they are owned by it,
    never detached), and a Ray it started is shut down with the last vector env using it, or
    when this process exits.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        address: str | None = None,
        num_workers: int | None = None,
        wait_num: int | None = None,
        timeout: float | None = None,
        worker_timeout: float | None = 120.0,
        start_timeout: float | None = 300.0,
        restart_failed: bool = False,
        init_kwargs: dict[str, Any] | None = None,
        actor_options: dict[str, Any] | None = None,
        max_restarts: int = 3,
    ) -> None:
        if len(env_fns) == 0:
            raise ConfigError(f"{type(self).__name__} needs at least one env factory")
        if (actor_options or {}).get("lifetime") == "detached":
            raise ConfigError(
                "actor_options: lifetime='detached' would let env actors outlive this process; "
                "leave lifetime unset"
            )
        if max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {max_restarts}")
        self._closed = True  # until Ray and the actors are up, close() has nothing to do
        self._holds_session = False
        self.num_envs = len(env_fns)
        self.address = address
        self.wait_num = wait_num
        self.timeout = timeout
        self.worker_timeout = worker_timeout
        self.start_timeout = start_timeout
        self.restart_failed = restart_failed
        self.max_restarts = max_restarts
        self._actor_options = {"max_restarts": 0, "max_task_retries": 0,
                               **(actor_options or {})}
        self._env_fns = list(env_fns)
        self._holds_session = session.acquire(address, dict(init_kwargs or {}))
        self._closed = False
        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self.num_workers = min(num_workers or max(1, cpus), self.num_envs)
            bounds = [i * self.num_envs // self.num_workers for i in range(self.num_workers + 1)]
            self._workers = [_Worker(w, bounds[w], bounds[w + 1])
                             for w in range(self.num_workers)]
            self._env_worker = np.empty(self.num_envs, dtype=np.int64)
            self._env_slot = np.empty(self.num_envs, dtype=np.int64)
            for w in self._workers:
                self._env_worker[w.start : w.stop] = w.index
                self._env_slot[w.start : w.stop] = np.arange(w.stop - w.start)
            self._all_ids = np.arange(self.num_envs)
            self._needs_reset = np.ones(self.num_envs, dtype=bool)
            self._in_flight = np.zeros(self.num_envs, dtype=bool)
            self._open: list[_Call] = []  # every call not answered yet, or answered and kept
            self.observation_space: gym.Space = None  # type: ignore[assignment]
            self.action_space: gym.Space = None  # type: ignore[assignment]
            self._remote_cls = ray.remote(EnvActor)
            makes = [self._start_worker(w) for w in self._workers]  # actors start in parallel
            for call in makes:
                self._handshake(call)
        except BaseException:
            self.close()
            raise
        self._int_actions = isinstance(self.action_space, gym.spaces.Discrete)
        self._box_obs = isinstance(self.observation_space, gym.spaces.Box)
        self._object_obs = has_object_leaves(self.observation_space)  # Text...: object arrays
        self._last_obs = empty_observations(self.observation_space, self.num_envs)

    # -- actor lifecycle ------------------------------------------------------------------------
    def _start_worker(self, w: _Worker) -> _Call:
        payload = cloudpickle.dumps(self._env_fns[w.start : w.stop])
        w.actor = self._remote_cls.options(**self._actor_options).remote(
            payload, w.ids.tolist()
        )
        w.dead, w.pid = None, None
        return self._submit(w, MAKE, w.ids, ())

    def _handshake(self, call: _Call) -> None:
        w = call.worker
        spaces, spec, metadata, render_mode, pid = self._result(call)
        w.pid = pid
        for k, (obs_space, act_space) in enumerate(spaces):
            if self.observation_space is None:
                self.observation_space, self.action_space = obs_space, act_space
                self.spec, self.metadata, self.render_mode = spec, metadata, render_mode
            if obs_space != self.observation_space or act_space != self.action_space:
                raise ConfigError(
                    f"env {w.start + k} has spaces {obs_space}, {act_space}; env 0 has "
                    f"{self.observation_space}, {self.action_space}. Every env of a vector env "
                    "must share its spaces"
                )

    def _kill(self, w: _Worker) -> None:
        if w.actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(w.actor, no_restart=True)

    def _fail(self, w: _Worker, what: str, error: BaseException | None) -> None:
        """Actor ``w`` died (``error``) or hung (None): replace it (``restart_failed``) or raise."""
        if error is None and what == MAKE:
            how = (f"did not start and build its envs within start_timeout={self.start_timeout}s "
                   "and was killed (is the cluster short of the resources the actors ask for?)")
        elif error is None:
            how = (f"did not answer {what} within worker_timeout={self.worker_timeout}s and was "
                   "killed")
        else:
            how = f"died while running {what} ({_death_detail(error)})"
        reason = f"env actor {w.index} (pid {w.pid}, envs {w.ids.tolist()}) {how}"
        self._kill(w)
        self._needs_reset[w.ids] = True
        mine = [c for c in self._open if c.worker is w and c.reply is _PENDING]
        spent = self.restart_failed and w.restarts >= self.max_restarts
        if not self.restart_failed or spent or any(c.method == MAKE for c in mine):
            w.dead = reason
            self._open = [c for c in self._open if c.worker is not w]
            self._in_flight[w.ids] = False
            if spent:
                raise EnvWorkerError(
                    f"{reason}. Env actor {w.index} was already replaced {w.restarts} times "
                    f"(max_restarts={self.max_restarts}); fix the env, or raise max_restarts"
                )
            raise EnvWorkerError(
                f"{reason}. Close this vector env and build a new one, or pass "
                "restart_failed=True to replace failed actors and go on"
            )
        w.restarts += 1
        warnings.warn(
            f"{reason}; starting a new actor (restart {w.restarts} of "
            f"max_restarts={self.max_restarts})", RuntimeWarning, stacklevel=3,
        )
        for c in mine:  # out of _open while the new actor is made, so its make can fail alone
            self._open.remove(c)
        self._handshake(self._start_worker(w))
        # steps it owed come back truncated; other calls go again to the new actor
        for c in mine:
            if c.method == STEP:
                c.synthetic = reason
            else:
                c.ref = getattr(w.actor, c.method).remote(*c.args)
                c.sent = time.monotonic()
            self._open.append(c)

    # -- remote calls ---------------------------------------------------------------------------
    def _check_alive(self, w: _Worker) -> None:
        if self._closed:
            raise EnvWorkerError("this vector env is closed; build a new one")
        if w.dead is not None:
            raise EnvWorkerError(
                f"{w.dead}; this vector env cannot use envs {w.ids.tolist()} any more. Build a "
                "new one, or pass restart_failed=True"
            )

    def _submit(self, w: _Worker, method: str, ids: np.ndarray, args: tuple) -> _Call:
        self._check_alive(w)
        call = _Call(w, method, ids, args)
        call.ref = getattr(w.actor, method).remote(*args)
        call.sent = time.monotonic()
        self._open.append(call)
        return call

    def _deadline(self, call: _Call) -> float | None:
        """When ``call`` counts as hung (None: never)."""
        limit = self.start_timeout if call.method == MAKE else self.worker_timeout
        return None if limit is None else call.sent + limit

    def _hang_limit(self, calls: Sequence[_Call]) -> float | None:
        """Seconds until the first of ``calls`` counts as hung (None: never)."""
        deadlines = [d for d in map(self._deadline, calls) if d is not None]
        return None if not deadlines else max(0.0, min(deadlines) - time.monotonic())

    def _unwrap(self, call: _Call, reply: tuple) -> Any:
        """The payload of an answered call; an env error becomes EnvWorkerError."""
        if reply[0] == "ok":
            return reply[1]
        _, env_id, command, exc_repr, tb = reply
        if call in self._open:
            self._open.remove(call)
        if call.method == STEP:
            self._in_flight[call.ids] = False
            self._needs_reset[call.ids] = True  # some of them may have stepped
        if call.method == MAKE:
            call.worker.dead = f"env {env_id} failed to build"
        if not tb:  # a problem of the env's own making (a misshapen observation), in one line
            name = getattr(getattr(self, "spec", None), "id", None) or "the env"
            raise EnvWorkerError(f"{name} ({command}): {exc_repr}")
        raise EnvWorkerError(
            f"env {env_id} raised in {command}: {exc_repr}\n"
            f"--- traceback in env actor {call.worker.index} (pid {call.worker.pid}) ---\n{tb}"
        )

    def _settle(self, call: _Call) -> None:
        """Wait (bounded) until ``call`` is answered or synthetic; failures go to ``_fail``."""
        while call.reply is _PENDING and call.synthetic is None:
            ready, _ = ray.wait([call.ref], num_returns=1, timeout=self._hang_limit([call]))
            if not ready:
                self._fail(call.worker, call.what, None)
                continue
            self._fetch(call)

    def _fetch(self, call: _Call) -> None:
        """Take the answer of a call whose ref is ready (it may be an actor's death)."""
        try:
            reply = ray.get(call.ref)
        except RayActorError as exc:
            self._fail(call.worker, call.what, exc)
            return
        except RayError as exc:  # the call itself failed in Ray (e.g. an unpicklable info)
            if call in self._open:
                self._open.remove(call)
            if call.method == STEP:
                self._in_flight[call.ids] = False
                self._needs_reset[call.ids] = True
            raise EnvWorkerError(
                f"envs {call.ids.tolist()} failed in {call.what} inside Ray: {exc}"
            ) from exc
        call.reply = self._unwrap(call, reply)

    def _result(self, call: _Call) -> Any:
        self._settle(call)
        self._open.remove(call)
        if call.synthetic is not None:
            return self._synthetic_step(call.ids, call.synthetic)
        return call.reply

    def _gather(self, calls: list[_Call]) -> list[Any]:
        """Payloads of ``calls``, in order; one ``ray.get`` on the fast path."""
        try:
            try:
                replies = ray.get([c.ref for c in calls], timeout=self._hang_limit(calls))
            except (RayError, GetTimeoutError):
                replies = None  # someone died, hung or failed: settle call by call
            if replies is not None:
                for c, r in zip(calls, replies):
                    c.reply = self._unwrap(c, r)
            return [self._result(c) for c in calls]
        finally:  # after an error, the calls not taken yet are dropped with it
            self._open = [c for c in self._open if not any(c is d for d in calls)]

    def _synthetic_step(self, ids: np.ndarray, reason: str) -> Any:
        """A truncated step for envs whose actor failed and was replaced."""
        n = len(ids)
        info = [{"env_worker_restarted": reason} for _ in range(n)]
        if self._box_obs:
            obs = take_rows(self._last_obs, ids)
        else:  # one observation per env, as an actor sends Dict/Tuple/Text observations
            obs = [take_rows(self._last_obs, i) for i in ids.tolist()]
        return obs, [0.0] * n, [False] * n, [True] * n, info

    # -- grouping env ids by actor --------------------------------------------------------------
    def _actions_for(self, actions: Any, rows: Any) -> Any:
        if isinstance(actions, np.ndarray) or isinstance(rows, slice):
            a = actions[rows]
        else:
            a = [actions[r] for r in rows]
        if self._int_actions and isinstance(a, np.ndarray):
            return a.tolist()  # plain ints: cheaper to serialise and to check in the env
        return a

    # -- joining per-actor results --------------------------------------------------------------
    def _stack(self, parts: list[Any]) -> Any:
        if self._box_obs:
            obs = parts[0] if len(parts) == 1 else np.concatenate(parts)
            if obs.dtype != self.observation_space.dtype:
                obs = obs.astype(self.observation_space.dtype)
            elif not obs.flags.writeable:
                obs = obs.copy()  # Ray hands out read-only views of its object store
            return obs
        items = [o for p in parts for o in p]
        if self._object_obs:  # Text leaves...: object arrays, one entry per env
            return stack_observations(self.observation_space, items)
        out = create_empty_array(self.observation_space, n=len(items), fn=np.empty)
        return concatenate(self.observation_space, items, out)

    def _assemble_step(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Join per-actor step results (see ``WorkerGroups._join_step``); a Dict/Tuple
        observation leaf of the wrong shape raises EnvWorkerError naming it."""
        try:
            return self._join_step(parts, order)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self._misshapen(parts, "step", exc)
            raise

    # -- protocol -------------------------------------------------------------------------------
    def reset(
        self,
        env_ids: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, list[dict]]:
        """Reset the given envs (all when None); an int ``seed`` seeds env ``i`` with
        ``seed + i``."""
        ids, all_ids, seeds = self._reset_plan(env_ids, seed)
        groups, order = self._groups(ids)
        calls = []
        for w, slots, rows, gids in groups:
            s = seeds[rows] if isinstance(rows, slice) else [seeds[r] for r in rows]
            calls.append(self._submit(w, RESET, gids, (slots, s, options)))
        payloads = self._gather(calls)
        try:
            obs = self._stack([p[0] for p in payloads])
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self._misshapen([(c.ids, p) for c, p in zip(calls, payloads)], "reset", exc)
            raise
        infos: list[dict] = [i for p in payloads for i in p[1]]
        joined = np.concatenate([c.ids for c in calls])
        if order is not None:
            obs = take_rows(obs, order)
            infos = [infos[k] for k in order]
            joined = joined[order]
        put_rows(self._last_obs, joined, obs)
        self._needs_reset[all_ids] = False
        return obs, infos

    def _check_steppable(self, all_ids: np.ndarray, actions: Any) -> None:
        if len(actions) != len(all_ids):
            raise ValueError(f"got {len(actions)} actions for {len(all_ids)} envs")
        bad = self._needs_reset[all_ids] | self._in_flight[all_ids]
        if bad.any():
            raise EnvWorkerError(
                f"envs {all_ids[bad].tolist()} finished their episode, were never reset or "
                "have a step in flight; call reset(env_ids) (or step_wait()) first"
            )

    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step the given envs with ``actions[j]`` for ``env_ids[j]`` and wait for all of them."""
        ids = self._ids(env_ids)
        all_ids = self._all_ids if ids is None else ids
        self._check_steppable(all_ids, actions)
        groups, order = self._groups(ids)
        calls = [
            self._submit(w, STEP, gids, (slots, self._actions_for(actions, rows)))
            for w, slots, rows, gids in groups
        ]
        try:
            payloads = self._gather(calls)
        except EnvWorkerError:
            # the other envs of this step moved on without the caller seeing it: reset them too
            self._needs_reset[all_ids] = True
            raise
        parts = [(c.ids, p) for c, p in zip(calls, payloads)]
        try:
            _, obs, rew, term, trunc, infos = self._assemble_step(parts, order)
        except EnvWorkerError:  # an observation that does not fit its space: the same
            self._needs_reset[all_ids] = True
            raise
        done = term | trunc
        if done.any():
            self._needs_reset[all_ids[done]] = True
        return obs, rew, term, trunc, infos

    def step_async(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Send actions to the given envs and return at once; ``step_wait`` collects results."""
        ids = self._ids(env_ids)
        all_ids = self._all_ids if ids is None else ids
        self._check_steppable(all_ids, actions)
        groups, _ = self._groups(ids)
        for w, slots, rows, gids in groups:
            call = self._submit(w, STEP, gids, (slots, self._actions_for(actions, rows)))
            call.is_async = True
            self._in_flight[gids] = True

    def step_wait(
        self, wait_num: int | None = None, timeout: float | None = None
    ) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Results of envs whose step finished: ``(env_ids, obs, rew, terminated, truncated,
        infos)``. Returns once ``wait_num`` envs are ready (default: the configured one, else all
        in flight) or, with ``timeout`` seconds, once it elapsed and at least one env is ready.
        Envs come back a whole actor call at a time, so more than ``wait_num`` may return."""
        self._ids(None)  # raises when closed
        wait_num = self.wait_num if wait_num is None else wait_num
        timeout = self.timeout if timeout is None else timeout
        flying = [c for c in self._open if c.is_async]
        total = sum(len(c.ids) for c in flying)
        if total == 0:
            raise EnvWorkerError("step_wait() with no step in flight; call step_async first")
        target = total if wait_num is None else min(wait_num, total)
        deadline = None if timeout is None else time.monotonic() + timeout

        def done(c: _Call) -> bool:
            return c.reply is not _PENDING or c.synthetic is not None

        while True:
            flying = [c for c in self._open if c.is_async]
            ready = sum(len(c.ids) for c in flying if done(c))
            waiting = [c for c in flying if not done(c)]
            if ready >= target or not waiting:
                break
            limit = self._hang_limit(waiting)
            if deadline is not None and ready > 0:
                left = max(0.0, deadline - time.monotonic())
                if left == 0.0:
                    break
                limit = left if limit is None else min(limit, left)
            got, _ = ray.wait([c.ref for c in waiting], num_returns=1, timeout=limit)
            if got:  # take every other answer that is already there, too
                more, _ = ray.wait([c.ref for c in waiting], num_returns=len(waiting),
                                   timeout=0)
                got = set(got) | set(more)
                for c in waiting:
                    if c.ref in got:
                        self._fetch(c)
            elif deadline is None or ready == 0 or time.monotonic() < deadline:
                # nothing came before the hang limit: kill and report whoever ran out of time
                now = time.monotonic()
                for c in waiting:
                    hung_at = self._deadline(c)
                    if not done(c) and hung_at is not None and hung_at <= now + 1e-3:
                        self._fail(c.worker, c.what, None)
        answered = [c for c in self._open if c.is_async and done(c)]
        self._open = [c for c in self._open if not (c.is_async and done(c))]
        parts = [
            (c.ids, self._synthetic_step(c.ids, c.synthetic) if c.synthetic is not None
             else c.reply)
            for c in answered
        ]
        try:
            ids, obs, rew, term, trunc, infos = self._assemble_step(parts, None)
        except EnvWorkerError:
            # an observation that does not fit its space: as when an actor reports an env
            # error, that actor's envs must be reset, the other envs are still owed
            lost = [c for c, p in zip(answered, parts) if self._obs_problem([p]) is not None]
            self._open += [c for c in answered if all(c is not d for d in lost)]
            bad = np.concatenate([c.ids for c in lost])
            self._in_flight[bad] = False
            self._needs_reset[bad] = True
            raise
        self._in_flight[ids] = False
        finished = term | trunc
        if finished.any():
            self._needs_reset[ids[finished]] = True
        return ids, obs, rew, term, trunc, infos

    def _call_groups(
        self,
        op: str,
        groups: list[tuple[Any, Any, Any, np.ndarray]],
        args_for: Callable[[Any, Any], tuple],
    ) -> list[Any]:
        calls = [self._submit(w, CALL, gids, (op, *args_for(slots, rows)))
                 for w, slots, rows, gids in groups]
        return self._gather(calls)

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, one per worker (for monitoring, and for tests that kill one)."""
        return [w.actor for w in self._workers]

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the actors (on their nodes)."""
        return [w.pid for w in self._workers]

    @property
    def started_ray(self) -> bool:
        """Whether this vector env runs on a Ray that this backend started: it is shut down when
        the last vector env using it closes."""
        return self._holds_session

    def close(self) -> None:
        """Close the envs, kill the actors and, after the last vector env using a Ray this
        backend started, shut that Ray down; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        workers = getattr(self, "_workers", [])
        try:
            if ray.is_initialized():
                live = [w for w in workers if w.actor is not None and w.dead is None]
                refs = []
                for w in live:
                    with contextlib.suppress(Exception):
                        refs.append(w.actor.close.remote())
                if refs:  # let envs close politely (renderers, files), but never wait long
                    with contextlib.suppress(Exception):
                        ray.wait(refs, num_returns=len(refs), timeout=2.0)
                for w in workers:
                    self._kill(w)
        finally:
            for w in workers:
                w.actor = None
            self._open = []
            if hasattr(self, "_in_flight"):
                self._in_flight[:] = False
            if self._holds_session:
                self._holds_session = False
                session.release()
