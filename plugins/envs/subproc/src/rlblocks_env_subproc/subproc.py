"""The multi-process vector env: a few worker processes, several envs each, batched commands.

Envs are split into contiguous blocks, one per worker process, so stepping all envs costs one
command and one reply per worker, not per env. On request (``local_envs``), envs ``[0,
local_envs)`` live in the calling process instead: a step sends the workers their commands
first, then steps the local envs while the workers work, then collects the replies, so the
parent does a share of the work instead of waiting (speed, at the price of isolation: an env
that crashes or hangs there takes the caller with it).
Requests to one worker are served in order; the parent keeps a FIFO of what each worker owes it,
which is what makes asynchronous stepping (``step_async`` / ``step_wait``) safe to mix with
resets of other envs. Local envs run a command when it is sent; their answer waits in the same
FIFO, so every path that collects a worker's answers collects theirs too.

Every wait is bounded: a worker that dies is seen at once (its pipe closes and its process
sentinel fires), one that does not answer within ``worker_timeout`` is killed and reported,
naming the env that was running. Workers die with the parent, however it ends
(:mod:`rlblocks_env_subproc.lifeline`).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import select
import signal
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait as mp_wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from rlblocks.collect import empty_observations, has_object_leaves, stack_observations
from rlblocks.contracts import ConfigError, EnvWorkerError, put_rows, take_rows
from rlblocks_env_subproc import worker as W
from rlblocks_env_subproc.grouping import WorkerGroups
from rlblocks_env_subproc.lifeline import Lifeline, register_parent_end

#: How long an idle worker busy-polls for the next command before it blocks (see
#: ``worker_spin_us``): about one vector step of a few cheap envs plus a round trip.
DEFAULT_SPIN_US = 200.0


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_num_workers(num_envs: int) -> int:
    """One worker per CPU core this process may use, never more than one per env."""
    return max(1, min(num_envs, _cores()))


def default_split(
    num_envs: int, num_workers: int | None = None, local_envs: int | None = 0,
    cores: int | None = None,
) -> tuple[int, int]:
    """``(worker processes, envs stepped in the calling process)`` for these options.

    ``local_envs=0`` (the default): every env in a worker, one worker per core (at most one per
    env) unless ``num_workers`` says otherwise. ``local_envs=None`` asks for speed over
    isolation; with ``num_workers=None``: on ``C >= 2`` usable cores the parent
    takes one core's share of the envs, counting the workers' command round trip (about 70 us on
    a small VM, the cost of one or two MuJoCo steps) as one more env: ``ceil((num_envs + 1) / C)``
    local envs, at most ``num_envs - 1``, and ``C - 1`` workers (at most one per remaining env)
    for the rest. With 2 cores and 8 envs: 5 local, 3 in one worker, so a vector step costs about
    ``max(5 steps, 3 steps + round trip)``. Envs much costlier than a round trip would balance
    best at ``num_envs / C``; pass ``local_envs`` for those. On one core, or with one env,
    everything runs in one worker as before. With an explicit ``num_workers`` the auto rule keeps
    every env in the workers (``local_envs=0``): the caller chose the processes. An explicit
    ``local_envs`` with ``num_workers=None`` leaves one core to the parent when it has envs."""
    cores = _cores() if cores is None else cores
    if local_envs is None:
        if num_workers is not None or cores < 2 or num_envs < 2:
            local_envs = 0
        else:
            local_envs = min(-(-(num_envs + 1) // cores), num_envs - 1)
    if not 0 <= local_envs < num_envs:
        raise ConfigError(
            f"local_envs={local_envs} must leave at least one of the {num_envs} envs to the "
            "worker processes (0 <= local_envs < num_envs); use backend='dummy' to step every "
            "env in this process"
        )
    remote = num_envs - local_envs
    if num_workers is None:
        num_workers = cores - 1 if local_envs and cores > 1 else cores
    return max(1, min(num_workers, remote)), local_envs


#: The worker's message kind for each env call that :class:`WorkerGroups` routes.
_CALLS = {
    "render": W.RENDER,
    "get_attr": W.GET_ATTR,
    "set_attr": W.SET_ATTR,
    "snapshot": W.SNAPSHOT,
    "restore": W.RESTORE,
}


#: A step of every env of a worker whose actions travel outside the command (shared memory),
#: pickled once: ``Connection.send`` would pickle the same tuple again for every worker and step.
_STEP_ALL_BYTES = bytes(ForkingPickler.dumps((W.STEP, None, None)))


def _default_context() -> str:
    return "fork" if "fork" in mp.get_all_start_methods() else "spawn"


class Request:
    """One command a worker owes an answer to. Public for backends built on this one (shmem
    decodes replies from it in its ``_decode_step``)."""

    __slots__ = ("ids", "kind", "msg", "orphan", "reply", "sent", "synthetic")

    def __init__(
        self, kind: int, ids: np.ndarray, msg: tuple, sent: float, reply: tuple | None = None
    ) -> None:
        self.kind = kind
        self.ids = ids  # global env ids, in the order the worker handles them
        self.msg = msg
        self.sent = sent
        self.synthetic: str | None = None  # set when its worker failed and was restarted
        self.reply = reply  # the answer already there (local envs run their commands at once)
        #: nobody waits for the answer any more (a step() interrupted while waiting): it is
        #: received and dropped, never handed to a later step_wait or step
        self.orphan = False


class Worker:
    """A block of envs: a worker process, or (``local``) the envs the parent steps itself.
    Public for backends built on this one (shmem starts one to learn the spaces)."""

    __slots__ = ("conn", "dead", "group", "ids", "index", "label", "local", "pending",
                 "poller", "process", "restarts", "start", "stop", "where")

    def __init__(self, index: int, start: int, stop: int, label: str, local: bool = False) -> None:
        self.index = index  # position in SubprocVectorEnv._workers
        self.label = label  # for messages: "env worker 0", "the calling process"
        self.local = local
        self.start, self.stop = start, stop
        self.ids = np.arange(start, stop)
        self.process: Any = None
        self.conn: Any = None
        #: a poll object on ``conn``, built once per pipe (``Connection.poll`` builds and
        #: registers a selector at every call)
        self.poller: Any = None
        self.group: Any = None  # local: the W.EnvGroup the parent runs commands in
        self.pending: deque[Request] = deque()
        self.dead: str | None = None
        self.restarts = 0  # times restart_failed restarted it
        self.where: Any = None  # shared int: the env the worker is running, -1 between commands

    @property
    def pid(self) -> int | None:
        return os.getpid() if self.local else getattr(self.process, "pid", None)


def _describe_exit(process: Any) -> str:
    code = process.exitcode
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"was killed by signal {-code}"
        hint = " (a crash in native code)" if name in ("SIGSEGV", "SIGBUS", "SIGILL") else ""
        return f"was killed by signal {name}{hint}"
    return f"exited with code {code}"


class SubprocVectorEnv(WorkerGroups):
    """Steps ``len(env_fns)`` envs in ``num_workers`` processes, several envs per process; with
    ``local_envs`` (default 0) the first ``local_envs`` envs step in the calling process instead
    (``None``: the split of :func:`default_split`, speed over isolation).

    Same contract as the in-process backend: no autoreset (the caller resets finished envs with
    ``reset(env_ids)``; stepping one that needs a reset raises EnvWorkerError), results in
    ``env_ids`` order, an int ``seed`` gives env ``i`` the seed ``seed + i``. Asynchronous use:
    ``step_async(actions, env_ids)`` then ``step_wait()`` returning
    ``(env_ids, obs, rew, terminated, truncated, infos)`` for the envs that are ready.
    Use it as a context manager or call ``close()``; worker processes never outlive it, nor
    the calling process, however it ends.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        context: str | None = None,
        wait_num: int | None = None,
        timeout: float | None = None,
        worker_timeout: float | None = 120.0,
        restart_failed: bool = False,
        local_envs: int | None = 0,
        worker_spin_us: float | None = None,
        max_restarts: int = 3,
        start_timeout: float | None = 300.0,
    ) -> None:
        if len(env_fns) == 0:
            raise ConfigError(f"{type(self).__name__} needs at least one env factory")
        self._closed = True  # until the workers are up, close() has nothing to do
        self.num_envs = len(env_fns)
        if local_envs is None and restart_failed:
            # a caller that expects workers to die wants every env isolated in one
            local_envs = 0
        if max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {max_restarts}")
        self.num_workers, self.local_envs = default_split(self.num_envs, num_workers, local_envs)
        if worker_spin_us is None:  # spin only where each worker can have a core to itself
            worker_spin_us = DEFAULT_SPIN_US if self.num_workers < _cores() else 0.0
        if worker_spin_us < 0:
            raise ConfigError(f"worker_spin_us must be >= 0, got {worker_spin_us}")
        self.worker_spin_us = float(worker_spin_us)
        self.context = context or _default_context()
        if self.context not in mp.get_all_start_methods():
            raise ConfigError(
                f"start method {self.context!r} is not available here; use one of "
                f"{mp.get_all_start_methods()}"
            )
        # an infinite limit is no limit (the only way to say so through ``auto``, whose None
        # means "not given")
        timeout, worker_timeout, start_timeout = (
            None if t is not None and math.isinf(t) else t
            for t in (timeout, worker_timeout, start_timeout)
        )
        self.wait_num = wait_num
        self.timeout = timeout
        self.worker_timeout = worker_timeout
        # starting a worker (process, imports, env constructors) may take far longer than a step
        self.start_timeout = (
            None if start_timeout is None or worker_timeout is None
            else max(start_timeout, worker_timeout)
        )
        self.restart_failed = restart_failed
        self.max_restarts = max_restarts
        self._ctx = mp.get_context(self.context)
        self._env_fns = list(env_fns)
        nl, remote = self.local_envs, self.num_envs - self.local_envs
        bounds = [nl + i * remote // self.num_workers for i in range(self.num_workers + 1)]
        self._workers = [Worker(0, 0, nl, "the calling process", local=True)] if nl else []
        self._workers += [
            Worker(len(self._workers) + w, bounds[w], bounds[w + 1], f"env worker {w}")
            for w in range(self.num_workers)
        ]
        self._remote = [w for w in self._workers if not w.local]
        self._local = self._workers[0] if nl else None
        self._env_worker = np.empty(self.num_envs, dtype=np.int64)
        self._env_slot = np.empty(self.num_envs, dtype=np.int64)
        for w in self._workers:
            self._env_worker[w.start : w.stop] = w.index
            self._env_slot[w.start : w.stop] = np.arange(w.stop - w.start)
        self._all_ids = np.arange(self.num_envs)
        self._needs_reset = np.ones(self.num_envs, dtype=bool)
        self._in_flight = np.zeros(self.num_envs, dtype=bool)
        self._stash: list[tuple[np.ndarray, Any]] = []  # step results received, not yet returned
        self.observation_space: gym.Space = None  # type: ignore[assignment]
        self.action_space: gym.Space = None  # type: ignore[assignment]
        self._setup_transport()
        self._closed = False
        try:
            for w in self._remote:
                self._start_worker(w)
            if self._local is not None:  # built while the workers build theirs
                self._start_local(self._local)
            for w in self._workers:
                self._handshake(w)
        except BaseException:
            self.close()
            raise
        self._int_actions = isinstance(self.action_space, gym.spaces.Discrete)
        self._box_obs = isinstance(self.observation_space, gym.spaces.Box)

    # -- hooks the shared-memory backend overrides ----------------------------------------------
    def _setup_transport(self) -> None:
        """Prepare how results travel; spaces are learnt from the workers' handshake."""
        self._transport: Any = None
        self._last_obs: Any = None  # [num_envs, ...]: fallback obs of restarted workers

    def _make_transport(self) -> Any:
        return W.PipeTransport()

    def _make_local_transport(self) -> Any:
        """The transport of the envs the parent steps (its own object: never sent anywhere)."""
        return W.PipeTransport()

    def _encode_actions(self, w: Worker, actions: Any, rows: Any) -> Any:
        """What a STEP command carries for the rows ``rows`` of ``actions``."""
        if isinstance(actions, np.ndarray) or isinstance(rows, slice):
            a = actions[rows]
        else:
            a = [actions[r] for r in rows]
        if self._int_actions and isinstance(a, np.ndarray):
            return a.tolist()  # plain ints: cheaper to pickle and to check in Discrete.contains
        return a

    def _write_actions(self, actions: Any, ids: np.ndarray | None) -> None:
        """Shared-memory backends store actions here before sending the commands."""

    def _decode_step(self, req: Request, payload: Any) -> Any:
        return payload

    def _decode_reset(self, req: Request, payload: Any) -> Any:
        return payload

    def _assemble_step(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Join per-worker step results; ``order`` permutes the joined rows (None: as joined)."""
        try:
            return self._join_step(parts, order)[1:]
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self._misshapen(parts, "step", exc)
            raise

    def _assemble_reset(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[Any, list[dict]]:
        try:
            obs = self._stack([p[1][0] for p in parts])
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self._misshapen(parts, "reset", exc)
            raise
        infos: list[dict] = [i for p in parts for i in p[1][1]]
        ids = np.concatenate([p[0] for p in parts])
        if order is not None:
            obs = take_rows(obs, order)
            infos = [infos[k] for k in order]
            ids = ids[order]
        put_rows(self._last_obs, ids, obs)
        return obs, infos

    def _synthetic_step(self, ids: np.ndarray, reason: str) -> Any:
        """A truncated step for envs whose worker failed and was restarted."""
        n = len(ids)
        info = [{"env_worker_restarted": reason} for _ in range(n)]
        if self._box_obs:
            obs = take_rows(self._last_obs, ids)
        else:  # one observation per env, as a pipe worker sends Dict/Tuple/Text observations
            obs = [take_rows(self._last_obs, i) for i in ids.tolist()]
        return obs, [0.0] * n, [False] * n, [True] * n, info

    def _stack(self, parts: list[Any]) -> Any:
        if self._box_obs:
            obs = parts[0] if len(parts) == 1 else np.concatenate(parts)
            if obs.dtype != self.observation_space.dtype:
                obs = obs.astype(self.observation_space.dtype)
            return obs
        items = [o for p in parts for o in p]
        if self._object_obs:  # Text leaves...: object arrays, one entry per env
            return stack_observations(self.observation_space, items)
        out = create_empty_array(self.observation_space, n=len(items), fn=np.empty)
        return concatenate(self.observation_space, items, out)

    # -- worker lifecycle ---------------------------------------------------------------------
    def _start_worker(self, w: Worker) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        register_parent_end(parent_conn)  # workers forked later let go of it
        if w.where is None:
            w.where = self._ctx.RawValue("q", -1)
        w.where.value = -1
        payload = cloudpickle.dumps(self._env_fns[w.start : w.stop])
        transport = self._transport if self._transport is not None else self._make_transport()
        process = self._ctx.Process(
            target=W.worker_main,
            args=(child_conn, payload, list(range(w.start, w.stop)), transport,
                  self.worker_spin_us * 1e-6, Lifeline(self.context), w.where),
            name=f"rlblocks-env-worker-{w.index}",
            daemon=True,
        )
        process.start()
        child_conn.close()  # only the worker holds its end: its death closes the pipe
        w.process, w.conn, w.dead = process, parent_conn, None
        w.poller = select.poll()
        w.poller.register(parent_conn.fileno(), select.POLLIN)
        w.pending.clear()
        w.pending.append(Request(-1, w.ids, (), time.monotonic()))

    def _start_local(self, w: Worker) -> None:
        """Build the parent's own envs; their handshake waits in ``pending`` like a reply."""
        group, hello = W.make_group(
            self._env_fns[w.start : w.stop], list(range(w.start, w.stop)),
            self._make_local_transport(),
        )
        w.group = group
        w.pending.append(Request(-1, w.ids, (), time.monotonic(), reply=hello))

    def _handshake(self, w: Worker) -> None:
        _req, payload = self._receive(w)
        spaces, spec, metadata, render_mode = payload
        for k, (obs_space, act_space) in enumerate(spaces):
            if self.observation_space is None:
                self.observation_space, self.action_space = obs_space, act_space
            if not hasattr(self, "metadata"):
                self.spec, self.metadata, self.render_mode = spec, metadata, render_mode
            if obs_space != self.observation_space or act_space != self.action_space:
                raise ConfigError(
                    f"env {w.start + k} has spaces {obs_space}, {act_space}; env 0 has "
                    f"{self.observation_space}, {self.action_space}. Every env of a vector env "
                    "must share its spaces"
                )
        self._object_obs = has_object_leaves(self.observation_space)
        if self._last_obs is None and self._transport is None:
            self._last_obs = empty_observations(self.observation_space, self.num_envs)

    def _fail(self, w: Worker, what: str) -> None:
        """Worker ``w`` died or hung: restart it (``restart_failed``, at most ``max_restarts``
        times) or raise. The message names the env that was running, when one was."""
        process = w.process
        env_id = int(w.where.value)
        hung = process.exitcode is None
        if hung:
            process.kill()
            process.join(5)
        where = f"{w.label} (pid {process.pid}, envs {w.ids.tolist()})"
        if env_id >= 0:
            where = f"env {env_id} in {where}"
        if hung:
            if what == "make":
                reason = (f"{where} did not start and build its envs within start_timeout="
                          f"{self.start_timeout}s; the worker was killed")
            else:
                reason = (f"{where} did not answer {what} within worker_timeout="
                          f"{self.worker_timeout}s; the worker was killed")
        else:
            reason = f"{where} {_describe_exit(process)} while running {what}"
        with contextlib.suppress(OSError):
            w.conn.close()
        self._needs_reset[w.ids] = True
        stale = list(w.pending)
        spent = self.restart_failed and w.restarts >= self.max_restarts
        building = any(r.kind < 0 for r in stale)  # it never finished building its envs
        if not self.restart_failed or spent or building:
            w.dead = reason
            w.pending.clear()
            self._in_flight[w.ids] = False
            if building:
                # restart_failed restarts workers that fail after they started: an env that
                # cannot be built would fail the same way again, so it is not offered here
                slow = (", or raise start_timeout if building them only takes long"
                        if hung else "")
                raise EnvWorkerError(
                    f"{reason}. Fix what building these envs does (the env factory or the "
                    f"env's constructor){slow}, then build the vector env again"
                )
            if spent:
                raise EnvWorkerError(
                    f"{reason}. {w.label} was already restarted {w.restarts} times "
                    f"(max_restarts={self.max_restarts}); fix the env, or raise max_restarts"
                )
            raise EnvWorkerError(
                f"{reason}. Close this vector env and build a new one, or pass "
                "restart_failed=True to restart failed workers and go on"
            )
        w.restarts += 1
        warnings.warn(
            f"{reason}; restarting {w.label} (restart {w.restarts} of "
            f"max_restarts={self.max_restarts})", RuntimeWarning, stacklevel=3,
        )
        self._start_worker(w)
        self._handshake(w)
        # steps it owed come back truncated; other commands are sent again to the new worker
        for r in stale:
            if r.kind == W.STEP:
                r.synthetic = reason
            else:
                w.conn.send(r.msg)
                r.sent = time.monotonic()
            w.pending.append(r)

    def _receive(self, w: Worker) -> tuple[Request, Any]:
        """The answer to the oldest request ``w`` owes; raises EnvWorkerError on env errors."""
        while True:
            req = w.pending[0]
            if req.synthetic is not None:
                w.pending.popleft()
                return req, self._synthetic_step(req.ids, req.synthetic)
            if req.reply is not None:  # a local command: ran when it was sent
                msg, req.reply = req.reply, None
                w.pending.popleft()
            else:
                conn = w.conn
                if conn.closed:  # as Connection.poll would say
                    raise OSError("handle is closed")
                # poll reports a hang-up or error as ready too, as Connection.poll does
                if not w.poller.poll(0):
                    limit = None
                    allowed = self.worker_timeout if req.kind >= 0 else self.start_timeout
                    if allowed is not None:
                        limit = max(0.0, req.sent + allowed - time.monotonic()) * 1000.0
                    # a dead worker's pipe reads as EOF at once: one poll covers death and hangs
                    if not w.poller.poll(limit):
                        self._fail(w, W.COMMAND_NAMES[req.kind] if req.kind >= 0 else "make")
                        continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    w.process.join(1)
                    self._fail(w, W.COMMAND_NAMES[req.kind] if req.kind >= 0 else "make")
                    continue
                w.pending.popleft()
            if msg[0] == "ok":
                return req, msg[1]
            _, env_id, command, exc_repr, tb = msg
            if req.kind == W.STEP:
                self._in_flight[req.ids] = False
                self._needs_reset[req.ids] = True  # some of them may have stepped
            if req.kind < 0:
                w.dead = f"env {env_id} failed to build"
            if not tb:  # a problem of the env's own making, said in one line
                name = getattr(self.spec, "id", None) or "the env"
                raise EnvWorkerError(f"{name} ({command}): {exc_repr}")
            raise EnvWorkerError(
                f"env {env_id} raised in {command}: {exc_repr}\n"
                f"--- traceback in {w.label} (pid {w.pid}) ---\n{tb}"
            )

    def _check_alive(self, w: Worker) -> None:
        if self._closed:
            raise EnvWorkerError("this vector env is closed; build a new one")
        if w.dead is not None:
            fix = ("Build a new one (this worker's restarts ran out)" if self.restart_failed
                   else "Build a new one, or pass restart_failed=True")
            raise EnvWorkerError(
                f"{w.dead}; this vector env cannot use envs {w.ids.tolist()} any more. {fix}"
            )

    def _send(self, w: Worker, kind: int, ids: np.ndarray, msg: tuple) -> Request:
        self._check_alive(w)
        if w.local:  # run it now; the reply (or the env's error) waits for _receive
            req = Request(kind, ids, msg, 0.0, reply=w.group.handle(msg))
            w.pending.append(req)
            return req
        req = Request(kind, ids, msg, time.monotonic())
        try:
            if kind == W.STEP and msg[1] is None and msg[2] is None:
                w.conn.send_bytes(_STEP_ALL_BYTES)
            else:
                w.conn.send(msg)
        except (OSError, ValueError):
            w.pending.append(req)
            self._fail(w, W.COMMAND_NAMES[kind])  # raises, or restarts and re-queues req
            return req
        w.pending.append(req)
        return req

    def _finish(self, w: Worker, req: Request) -> Any:
        """Receive until ``req`` is answered; earlier step answers go to the async stash."""
        while True:
            got, payload = self._receive(w)
            if got is req:
                return payload
            if got.kind == W.STEP and not got.orphan:
                self._stash.append((got.ids, self._decode_step(got, payload)))

    def _send_groups(
        self, kind: int, groups: list[tuple[Any, Any, Any, np.ndarray]],
        make_msg: Callable[[Worker, Any, Any], tuple],
    ) -> list[tuple[Worker, np.ndarray, Request]]:
        """Send ``make_msg(worker, slots, rows)`` to every group, in the groups' order in the
        result, but the workers first: the local envs (group 0 when there are some) run their
        command while the workers run theirs."""
        sent: list[Any] = [None] * len(groups)
        first = 1 if groups and groups[0][0].local else 0
        for k in (*range(first, len(groups)), *range(first)):
            w, slots, rows, gids = groups[k]
            sent[k] = (w, gids, self._send(w, kind, gids, make_msg(w, slots, rows)))
        return sent

    def _collect(self, sent: list[tuple[Worker, np.ndarray, Request]]) -> list[Any]:
        """Every group's answer, in order; an env error is raised once all are received (no
        reply may linger in a pipe)."""
        out, error = [], None
        for w, _, req in sent:
            try:
                out.append(self._finish(w, req))
            except EnvWorkerError as exc:
                error = error or exc
                out.append(None)
        if error is not None:
            raise error
        return out

    # -- protocol -----------------------------------------------------------------------------
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

        def msg(w: Worker, slots: Any, rows: Any) -> tuple:
            s = seeds[rows] if isinstance(rows, slice) else [seeds[r] for r in rows]
            return (W.RESET, slots, s, options)

        sent = self._send_groups(W.RESET, groups, msg)
        parts = [
            (gids, self._decode_reset(req, payload))
            for (_, gids, req), payload in zip(sent, self._collect(sent))
        ]
        out = self._assemble_reset(parts, order)  # a misshapen observation raises here
        self._needs_reset[all_ids] = False
        return out

    def step_async(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Send actions to the given envs and return; ``step_wait`` collects results. Local envs
        step here, after the workers got their commands; their results (or their env's error)
        wait for ``step_wait`` like a worker's reply."""
        ids = self._ids(env_ids)
        all_ids = self._all_ids if ids is None else ids
        if len(actions) != len(all_ids):
            raise ValueError(f"got {len(actions)} actions for {len(all_ids)} envs")
        busy = self._in_flight[all_ids]
        if busy.any():
            raise EnvWorkerError(
                f"envs {all_ids[busy].tolist()} already have a step in flight; call step_wait()"
            )
        stale = self._needs_reset[all_ids]
        if stale.any():
            raise EnvWorkerError(
                f"envs {all_ids[stale].tolist()} finished their episode or were never reset; "
                "call reset(env_ids) first"
            )
        groups, _ = self._groups(ids)
        self._write_actions(actions, ids)
        self._in_flight[all_ids] = True
        try:
            self._send_groups(W.STEP, groups, lambda w, slots, rows: (
                W.STEP, slots, self._encode_actions(w, actions, rows)))
        except BaseException:
            # a send that raised (dead worker): the envs it did not reach are not in flight
            owed = [r.ids for w in self._workers for r in w.pending if r.kind == W.STEP]
            owed += [i for i, _ in self._stash]
            self._in_flight[all_ids] = False
            if owed:
                self._in_flight[np.concatenate(owed)] = True
            raise

    def step_wait(
        self, wait_num: int | None = None, timeout: float | None = None
    ) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Results of envs whose step finished: ``(env_ids, obs, rew, terminated, truncated,
        infos)``. Returns once ``wait_num`` envs are ready (default: the configured one, else all
        in flight) or, with ``timeout`` seconds, once it elapsed and at least one env is ready.
        Envs come back whole-worker at a time, so slightly more than ``wait_num`` may return;
        the local envs' results are ready as soon as ``step_async`` returns."""
        self._ids(None)  # raises when closed
        wait_num = self.wait_num if wait_num is None else wait_num
        timeout = self.timeout if timeout is None else timeout
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds (None: wait), got {timeout}")
        if wait_num is not None and wait_num < 1:
            raise ValueError(
                f"wait_num must be at least 1 (None: every env in flight), got {wait_num}"
            )
        flying = int(self._in_flight.sum()) - sum(len(i) for i, _ in self._stash)
        ready = sum(len(i) for i, _ in self._stash)
        if flying + ready == 0:
            raise EnvWorkerError("step_wait() with no step in flight; call step_async first")
        target = flying + ready if wait_num is None else min(wait_num, flying + ready)
        deadline = None if timeout is None else time.monotonic() + timeout
        while ready < target:
            busy = [w for w in self._workers if w.pending and w.pending[0].kind == W.STEP]
            if not busy:
                break
            # answers already here: local envs' steps, and the truncations of restarted workers
            instant = [w for w in busy
                       if w.pending[0].reply is not None or w.pending[0].synthetic is not None]
            conns = [w.conn for w in busy if w not in instant]
            limit = None
            if deadline is not None and ready > 0:
                limit = max(0.0, deadline - time.monotonic())
            if self.worker_timeout is not None and not instant:
                oldest = min(w.pending[0].sent for w in busy)
                hang = max(0.0, oldest + self.worker_timeout - time.monotonic())
                limit = hang if limit is None else min(limit, hang)
            if not instant:
                sentinels = [w.process.sentinel for w in busy]
                got = mp_wait(conns + sentinels, limit)
                if not got:
                    now = time.monotonic()
                    if deadline is not None and ready > 0 and now >= deadline:
                        break
                    # a hang: _receive kills and reports the worker that ran out of time
                    got = [w.conn for w in busy
                           if self.worker_timeout is not None
                           and w.pending[0].sent + self.worker_timeout <= now + 1e-3]
            else:
                got = []
            for w in busy:
                if w in instant or w.conn in got or w.process.sentinel in got:
                    req, payload = self._receive(w)
                    if req.orphan:  # the answer to an interrupted step(): nobody's result
                        continue
                    self._stash.append((req.ids, self._decode_step(req, payload)))
                    ready += len(req.ids)
            if deadline is not None and ready > 0 and time.monotonic() >= deadline:
                break
        parts, self._stash = self._stash, []
        ids = np.concatenate([p[0] for p in parts])
        try:
            obs, rew, term, trunc, infos = self._assemble_step(parts, None)
        except EnvWorkerError:
            # an observation that does not fit its space: as when a worker reports an env
            # error, that worker's envs must be reset, the other envs are still owed
            lost = [p for p in parts if self._obs_problem([p]) is not None]
            self._stash = [p for p in parts if all(p is not q for q in lost)]
            bad = np.concatenate([p[0] for p in lost])
            self._in_flight[bad] = False
            self._needs_reset[bad] = True
            raise
        self._in_flight[ids] = False
        done = term | trunc
        if np.count_nonzero(done):
            self._needs_reset[ids[done]] = True
        return ids, obs, rew, term, trunc, infos

    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step the given envs with ``actions[j]`` for ``env_ids[j]`` and wait for all of them."""
        ids = self._ids(env_ids)
        all_ids = self._all_ids if ids is None else ids
        n = len(all_ids)
        if len(actions) != n:
            raise ValueError(f"got {len(actions)} actions for {n} envs")
        # a step of every env reads the flags whole (no gathered copies)
        need, flying = (
            (self._needs_reset, self._in_flight) if ids is None
            else (self._needs_reset[all_ids], self._in_flight[all_ids])
        )
        if np.count_nonzero(need) or np.count_nonzero(flying):
            bad = all_ids[need | flying].tolist()
            raise EnvWorkerError(
                f"envs {bad} finished their episode, were never reset or have a step in flight; "
                "call reset(env_ids) (or step_wait()) first"
            )
        groups, order = self._groups(ids)
        self._write_actions(actions, ids)
        sent = self._send_groups(W.STEP, groups, lambda w, slots, rows: (
            W.STEP, slots, self._encode_actions(w, actions, rows)))
        parts, error = [], None
        try:
            for w, gids, req in sent:
                try:
                    parts.append((gids, self._decode_step(req, self._finish(w, req))))
                except EnvWorkerError as exc:  # keep draining: no reply may linger in a pipe
                    error = error or exc
        except BaseException:
            # interrupted while waiting (Ctrl-C): the answers still to come belong to no caller,
            # so they are dropped when they arrive, and these envs moved on unseen: reset them
            for _, _, req in sent:
                req.orphan = True
            self._needs_reset[all_ids] = True
            raise
        if error is not None:
            # the other envs of this step moved on without the caller seeing their results
            self._needs_reset[all_ids] = True
            raise error
        try:
            obs, rew, term, trunc, infos = self._assemble_step(parts, order)
        except EnvWorkerError:  # an observation that does not fit its space: the same
            self._needs_reset[all_ids] = True
            raise
        done = term | trunc
        if np.count_nonzero(done):
            self._needs_reset[all_ids[done]] = True
        return obs, rew, term, trunc, infos

    def _call_groups(
        self,
        op: str,
        groups: list[tuple[Any, Any, Any, np.ndarray]],
        args_for: Callable[[Any, Any], tuple],
    ) -> list[Any]:
        kind = _CALLS[op]
        return self._collect(
            self._send_groups(kind, groups, lambda w, slots, rows: (kind, *args_for(slots, rows)))
        )

    @property
    def worker_pids(self) -> list[int | None]:
        """Process id of each worker, in worker order (for monitoring, and for tests that kill
        one); the calling process, which steps the local envs, is not one of them. A worker that
        is not running is None, so positions stay those of the workers: one that failed for good
        (``restart_failed`` off, or its ``max_restarts`` spent), one that died since the last
        command (it is reported, or restarted, by the next one), and every worker once the
        vector env is closed. A restarted worker shows its new process."""
        return [
            w.process.pid
            if w.process is not None and w.dead is None and w.process.exitcode is None
            else None
            for w in self._remote
        ]

    def close(self) -> None:
        """Stop every worker (politely, then by force); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        live = [w for w in self._workers if w.process is not None]
        for w in live:
            if w.dead is None and w.process.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    w.conn.send((W.CLOSE,))
        deadline = time.monotonic() + 2.0
        for w in live:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(1.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(1.0)
            with contextlib.suppress(OSError):
                w.conn.close()
            w.pending.clear()
        local = getattr(self, "_local", None)
        if local is not None:
            local.pending.clear()
            if local.group is not None:
                local.group.close()
                local.group = None
        self._stash.clear()
        self._in_flight[:] = False
