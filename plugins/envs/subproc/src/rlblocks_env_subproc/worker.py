"""The worker process: owns a few envs and runs batched commands on them.

Protocol (parent -> worker, one pickled tuple per command; worker -> parent, one reply each)::

    (STEP, slots | None, actions | None)   -> ("ok", transport.pack_step(...))
    (RESET, slots | None, seeds, options)  -> ("ok", transport.pack_reset(...))
    (RENDER, slots | None)                 -> ("ok", [frame, ...])
    (GET_ATTR, slots | None, name)         -> ("ok", [value, ...])
    (SET_ATTR, slots | None, name, value)  -> ("ok", None)
    (SNAPSHOT, slots | None)               -> ("ok", [env snapshot or None, ...]) (see
                                              rlblocks.collect)
    (RESTORE, slots | None, snapshots)     -> ("ok", None)
    (CLOSE,)                               -> ("ok", None), then the worker exits

``slots`` index the worker's own envs (None: all of them, the hot path). An env that raises
answers ``("err", env_id, command, repr(exc), traceback)`` and the worker keeps serving. The
transport decides how bulk results travel: inside the reply (pipes) or through shared memory.
The commands run in an :class:`EnvGroup`, which the parent also uses for its ``local_envs``.
While an env runs, the worker writes its id into a shared integer (``where``): when the worker
crashes or hangs, the parent names the env that was running.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import time
import traceback
from collections.abc import Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from rlblocks.collect import env_state as env_state
from rlblocks.collect import step_value_problem

STEP, RESET, RENDER, GET_ATTR, SET_ATTR, CLOSE, SNAPSHOT, RESTORE = range(8)
COMMAND_NAMES = ("step", "reset", "render", "get_attr", "set_attr", "close", "snapshot", "restore")


class ObservationMismatch(ValueError):
    """An env returned an observation its own observation space does not describe, or a reward
    or flag of the wrong type; the parent reports it as one line (no worker traceback: the env,
    not rlblocks, is at fault)."""


def check_observations(
    gids: Any, obs: list[Any], expected: Sequence[tuple[Any, tuple[int, ...]]]
) -> None:
    """Raise :class:`ObservationMismatch` naming the first env whose observation leaf has
    another shape than its space says (``expected``: ``(path, shape)`` per leaf; path ``()`` for
    a flat space). Called only after a write failed, so it costs nothing on the hot path."""
    ids = list(range(gids.start, gids.stop)) if isinstance(gids, slice) else list(gids)
    for env_id, o in zip(ids, obs, strict=False):
        for path, shape in expected:
            leaf = o
            for key in path:
                leaf = leaf[key]
            got = tuple(np.shape(leaf))
            if got != tuple(shape):
                where = "".join(f"[{k!r}]" for k in path)
                raise ObservationMismatch(
                    f"env {env_id} returned an observation{where} of shape {got}, but its "
                    f"observation space says {tuple(shape)}; fix the env or a wrapper so that "
                    "they agree"
                )


class PipeTransport:
    """Results travel inside the reply: Box observations stacked into one array per worker
    (one pickle instead of one per env), rewards and flags as plain lists (cheap to pickle)."""

    box_obs = False
    shape: tuple[int, ...] = ()

    def attach(self, env_ids: Sequence[int], observation_space: gym.Space) -> None:
        """Called once in the worker before the first command."""
        self.box_obs = isinstance(observation_space, gym.spaces.Box)
        if self.box_obs:
            self.shape = tuple(observation_space.shape)

    def read_actions(self, gids: Any) -> Any:
        raise RuntimeError("PipeTransport sends actions inside the command")

    def _obs(self, gids: Any, obs_list: list[Any]) -> Any:
        # np.array builds [n, *shape] like np.stack (same-shaped arrays), at a third of the cost.
        # Dict/Tuple/Text observations travel as they are: the parent stacks them and, when
        # that fails, names the misshapen leaf (SubprocVectorEnv._misshapen)
        if not self.box_obs:
            return obs_list
        try:
            out = np.array(obs_list)
        except ValueError:  # ragged: some env's shape is off
            out = None
        if out is None or out.shape[1:] != self.shape:
            check_observations(gids, obs_list, [((), self.shape)])  # names the env by its id
        return out

    def pack_step(
        self, gids: Any, obs: list[Any], rew: list[float], term: list[bool], trunc: list[bool],
        infos: list[dict],
    ) -> Any:
        return self._obs(gids, obs), rew, term, trunc, infos

    def pack_reset(self, gids: Any, obs: list[Any], infos: list[dict]) -> Any:
        return self._obs(gids, obs), infos


class NoTracker:
    """Stands in for the shared ``where`` integer of a worker when nobody reads it (the
    parent's own envs)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = -1


def _close_envs(envs: list[gym.Env]) -> None:
    for env in envs:
        with contextlib.suppress(Exception):
            env.close()


class EnvGroup:
    """A few envs and the transport their results travel by: runs one command at a time.

    Used by the worker processes and, for ``local_envs``, by the parent itself (so local envs
    behave exactly like remote ones: same seeding, same packing, same error replies).
    ``where.value`` holds the id of the env running a command, -1 between commands."""

    def __init__(
        self, envs: list[gym.Env], env_ids: Sequence[int], transport: Any, where: Any = None
    ) -> None:
        self.envs = envs
        self.env_ids = list(env_ids)
        self.transport = transport
        self.where = NoTracker() if where is None else where
        self.all_slots = list(range(len(envs)))
        # slots whose step() results are not checked yet (step_value_problem): checked on each
        # env's first step, then the set is empty and the usual step tests it once
        self.unchecked: set[int] = set(self.all_slots)
        self.first_id, self.last_id = self.env_ids[0], self.env_ids[-1] + 1
        transport.attach(self.env_ids, envs[0].observation_space)

    def handshake(self) -> tuple:
        first = self.envs[0]
        spaces = [(e.observation_space, e.action_space) for e in self.envs]
        return ("ok", (spaces, getattr(first, "spec", None), first.metadata,
                       getattr(first, "render_mode", None)))

    def handle(self, msg: tuple) -> tuple:
        """The reply to one command (not CLOSE): ``("ok", payload)`` or ``("err", env_id,
        command, repr(exc), traceback)`` when an env raised."""
        cmd = msg[0]
        env_ids, envs, transport, where = self.env_ids, self.envs, self.transport, self.where
        slots = self.all_slots if msg[1] is None else msg[1]
        # rows of these envs in the shared arrays: a slice on the hot path
        gids: Any = (
            slice(self.first_id, self.last_id) if msg[1] is None else [env_ids[s] for s in slots]
        )
        current = env_ids[slots[0]] if slots else -1
        try:
            if cmd == STEP:
                actions = msg[2]
                if actions is None:  # numpy integer scalars: gymnasium 1.x checks them faster
                    actions = transport.read_actions(gids)
                obs_l, rew_l, term_l, trunc_l, info_l = [], [], [], [], []
                unchecked = self.unchecked
                for k, s in enumerate(slots):
                    current = where.value = env_ids[s]
                    obs, rew, term, trunc, info = envs[s].step(actions[k])
                    if unchecked and s in unchecked:
                        problem = step_value_problem(current, rew, term, trunc)
                        if problem is not None:
                            raise ObservationMismatch(problem)
                        unchecked.discard(s)
                    obs_l.append(obs)
                    rew_l.append(float(rew))
                    term_l.append(bool(term))
                    trunc_l.append(bool(trunc))
                    info_l.append(info)
                reply: Any = transport.pack_step(gids, obs_l, rew_l, term_l, trunc_l, info_l)
            elif cmd == RESET:
                seeds, options = msg[2], msg[3]
                obs_l, info_l = [], []
                for k, s in enumerate(slots):
                    current = where.value = env_ids[s]
                    obs, info = envs[s].reset(seed=seeds[k], options=options)
                    obs_l.append(obs)
                    info_l.append(info)
                reply = transport.pack_reset(gids, obs_l, info_l)
            elif cmd == RENDER:
                reply = []
                for s in slots:
                    current = where.value = env_ids[s]
                    reply.append(envs[s].render())
            elif cmd == GET_ATTR:
                reply = []
                for s in slots:
                    current = where.value = env_ids[s]
                    reply.append(envs[s].get_wrapper_attr(msg[2]))
            elif cmd == SET_ATTR:
                for s in slots:
                    current = where.value = env_ids[s]
                    envs[s].set_wrapper_attr(msg[2], msg[3])
                reply = None
            elif cmd == SNAPSHOT:
                reply = []
                for s in slots:
                    current = where.value = env_ids[s]
                    reply.append(env_state.snapshot_or_reason(envs[s]))
            elif cmd == RESTORE:
                for k, s in enumerate(slots):
                    current = where.value = env_ids[s]
                    env_state.restore(envs[s], msg[2][k])
                reply = None
            else:
                raise ValueError(f"unknown worker command {cmd!r}")
            where.value = -1
            return ("ok", reply)
        except ObservationMismatch as exc:  # the env's fault, said in one line
            where.value = -1
            return ("err", current, COMMAND_NAMES[cmd], str(exc), "")
        except Exception as exc:
            where.value = -1
            return ("err", current, COMMAND_NAMES[cmd], repr(exc), traceback.format_exc())

    def close(self) -> None:
        _close_envs(self.envs)


def make_group(
    env_fns: Sequence[Any], env_ids: Sequence[int], transport: Any, where: Any = None
) -> tuple:
    """``(EnvGroup or None, handshake reply)``: builds the envs; an env that raises gives
    ``(None, ("err", env_id, "make", repr(exc), traceback))`` and the ones built are closed."""
    envs: list[gym.Env] = []
    current = env_ids[0]
    tracker = NoTracker() if where is None else where
    try:
        for gid, fn in zip(env_ids, env_fns):
            current = tracker.value = gid
            envs.append(fn())
        tracker.value = -1
        group = EnvGroup(envs, env_ids, transport, where)
        return group, group.handshake()
    except Exception as exc:
        tracker.value = -1
        _close_envs(envs)
        return None, ("err", current, "make", repr(exc), traceback.format_exc())


def _wait_for_command(conn: Any, poller: Any, spin_s: float) -> None:
    """Busy-poll the pipe for up to ``spin_s`` seconds, yielding the CPU between polls.

    A worker that blocks in ``recv`` right after replying is put to sleep, and waking it for the
    next command costs tens of microseconds on a VM (more than a CartPole step). While envs are
    being stepped the next command comes within a vector step, so a short spin catches it awake;
    when none comes (the parent is learning) the worker goes back to blocking."""
    end = time.perf_counter() + spin_s
    while not poller.poll(0) and time.perf_counter() < end:
        os.sched_yield()


def worker_main(
    conn: Any, fns_payload: bytes, env_ids: list[int], transport: Any, spin_s: float = 0.0,
    lifeline: Any = None, where: Any = None,
) -> None:
    """Entry point of a worker process (module level so every start method can import it).

    ``lifeline`` (a :class:`~rlblocks_env_subproc.lifeline.Lifeline`) ties the worker's life to
    its parent's; ``where`` is the shared integer that names the env running a command."""
    if lifeline is not None:
        lifeline.attach(conn)
    # an env that crashes the interpreter leaves its Python stack on stderr
    with contextlib.suppress(Exception):
        faulthandler.enable()
    try:
        group, hello = make_group(cloudpickle.loads(fns_payload), env_ids, transport, where)
    except BaseException as exc:
        conn.send(("err", env_ids[0], "make", repr(exc), traceback.format_exc()))
        return
    conn.send(hello)
    if group is None:
        return
    handle = group.handle
    poller = None
    if spin_s > 0:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
    while True:
        if poller is not None:
            _wait_for_command(conn, poller, spin_s)
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break  # the parent is gone: nobody to serve
        if msg[0] == CLOSE:
            group.close()
            with contextlib.suppress(OSError):
                conn.send(("ok", None))
            break
        reply = handle(msg)
        try:
            try:
                conn.send(reply)
            except OSError:
                raise
            except Exception as exc:  # a result that does not pickle: report, keep serving
                slots = group.all_slots if msg[1] is None else msg[1]
                env_id = group.env_ids[slots[0]] if slots else -1
                conn.send(("err", env_id, COMMAND_NAMES[msg[0]], repr(exc),
                           traceback.format_exc()))
        except OSError:
            break
