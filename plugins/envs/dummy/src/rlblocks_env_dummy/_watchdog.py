"""Hung and crashing envs of the in-process backend, reported by the env they happened in.

**Hangs.** A watchdog thread turns a ``step`` or ``reset`` that takes longer than
``worker_timeout`` into an EnvWorkerError naming the env. The stepping thread pays almost
nothing for it: each vector ``step``/``reset`` stores one tuple on the vector env saying what
it does (the command, the env ids, the list of results so far, its thread) and clears it when
done; nothing is handed to another thread per step. One daemon thread per process looks at the
watched vector envs about once a second (at a quarter of the shortest timeout when that is
less): the same tuple seen for ``worker_timeout`` seconds is a hung call, hung in the first env
whose result is missing.

Python can interrupt a hung call in two ways, and the watchdog uses the one that reaches it:

- in the main thread, a signal whose handler raises :class:`EnvHung`; the signal also breaks a
  blocking system call (``time.sleep``, a read from a socket). It is SIGWINCH, which every
  process ignores unless it asks for it, so the handler passes anything else on unchanged;
- in another thread, an asynchronous exception, raised at its next Python instruction.

An env stuck in native code that neither returns nor lets a signal through cannot be
interrupted: a grace period later, the watchdog writes the error and the Python stack of every
thread to stderr and ends the process (exit status 1) instead of leaving it hung for good. An
env that holds the GIL while it hangs stops the watchdog too; only a worker process
(``env.backend=subproc``) helps there. So does a trace function (a debugger, coverage) in a run
whose hang sits in native code in another thread than the main one: the pending asynchronous
exception keeps CPython 3.11's eval breaker set and the watchdog thread stalls.

**Crashes.** An env that dies in native code (a segfault) takes this process with it. The
backend turns on :mod:`faulthandler` (to stderr), which prints the Python stack of the crash,
and steps env ``i`` through a function whose file name says ``<env i, ...>``: the stack names
the env, with the advice to step envs in worker processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

#: The signal that interrupts a hung call in the main thread (ignored by default).
POKE: signal.Signals | None = getattr(signal, "SIGWINCH", None)
#: Longest and shortest pause between two looks of the watchdog, in seconds.
MAX_TICK_S = 1.0
MIN_TICK_S = 0.05
#: Exit status of a process ended because an env hung beyond interruption.
EXIT_STATUS = 1

#: The file name of the function that steps env ``i``: what a crash's stack shows.
CALL_SITE = (
    "<env {index}, stepped in this process by the dummy backend; env.backend=subproc steps "
    "each env in a worker process, which a crash or hang does not take down>"
)


class EnvHung(BaseException):
    """Raised into the thread stuck in an env call; the vector env turns it into an
    EnvWorkerError naming the env. A BaseException, so that an env's own ``except Exception``
    does not swallow it."""

    def __init__(
        self, message: str = "an env of the dummy backend did not finish within worker_timeout"
    ) -> None:
        super().__init__(message)


def grace_s(timeout: float) -> float:
    """Seconds an interrupted call gets to unwind before the process is ended."""
    return min(max(timeout, 1.0), 10.0)


def call_sites(index: int, env: Any) -> tuple[Callable[[Any], Any], Callable[..., Any]]:
    """``step(action)`` and ``reset(seed, options)`` of ``env`` through functions whose frames
    name env ``index`` (see the module docstring); one Python call more per env step."""
    env_step, env_reset = env.step, env.reset

    def step(action: Any) -> Any:
        return env_step(action)

    def reset(seed: Any, options: Any) -> Any:
        return env_reset(seed=seed, options=options)

    where = CALL_SITE.format(index=index)
    step.__code__ = step.__code__.replace(co_filename=where, co_firstlineno=1)
    reset.__code__ = reset.__code__.replace(co_filename=where, co_firstlineno=1)
    return step, reset


def enable_faulthandler() -> None:
    """Print the Python stack when this process dies of a fatal signal, unless something
    (pytest, ``python -X faulthandler``) has set that up already."""
    if faulthandler.is_enabled():
        return
    with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):
        faulthandler.enable(file=sys.stderr, all_threads=True)


class Watchdog:
    """The watchdog thread of this process and the vector envs it watches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._envs: weakref.WeakSet[Any] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._previous: Any = None  # the POKE handler ours replaced
        self._poke_installed = False

    def watch(self, venv: Any) -> None:
        """Watch ``venv`` (its ``_busy``, ``_worker_timeout``, ``_watch_state`` and ``_hung``
        attributes) until :meth:`unwatch` or until it is collected."""
        with self._lock:
            self._envs.add(venv)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="rlblocks-env-watchdog", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        self._install_poke()

    def unwatch(self, venv: Any) -> None:
        with self._lock:
            self._envs.discard(venv)

    def after_fork(self) -> None:
        """In a forked child: no watchdog thread runs there, and the envs are the parent's."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._envs = weakref.WeakSet()
        self._thread = None

    def _install_poke(self) -> None:
        if self._poke_installed or POKE is None:
            return
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set a handler; a later env there will
        previous = signal.getsignal(POKE)
        try:
            signal.signal(POKE, self._on_poke)
        except (ValueError, OSError):
            return
        self._previous, self._poke_installed = previous, True

    def _on_poke(self, signum: int, frame: Any) -> None:
        for venv in list(self._envs):
            hung = venv._hung
            if hung is not None and not hung[2] and hung[0] is venv._busy:
                hung[2] = True
                raise EnvHung(hung[1])
        if callable(self._previous):  # not ours: as if we were not there
            self._previous(signum, frame)

    # -- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                timeouts = [v._worker_timeout for v in self._envs]
                if not timeouts:
                    self._thread = None
                    return
                self._wake.wait(min(MAX_TICK_S, max(MIN_TICK_S, min(timeouts) / 4)))
            self._look_all(time.monotonic())  # its locals go: no env is held between looks

    def _look_all(self, now: float) -> None:
        with self._lock:
            envs = list(self._envs)
        for venv in envs:
            self._look(venv, now)

    def _look(self, venv: Any, now: float) -> None:
        busy = venv._busy
        state = venv._watch_state
        if busy is None or state is None or state[0] is not busy:
            venv._watch_state = None if busy is None else [busy, now, None]
            return
        _, since, fired = state
        if fired is None:
            if now - since >= venv._worker_timeout:
                state[2] = now
                self._interrupt(venv, busy)
        elif now - fired >= grace_s(venv._worker_timeout):
            self._end_process(venv)

    def _interrupt(self, venv: Any, busy: tuple[Any, ...]) -> None:
        thread_id = busy[3]
        venv._hung = [busy, venv._hang_message(busy), False]
        main = threading.main_thread().ident
        if thread_id == main and self._poke_installed and signal.getsignal(POKE) == self._on_poke:
            signal.pthread_kill(thread_id, POKE)
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread_id), ctypes.py_object(EnvHung)
            )

    @staticmethod
    def _end_process(venv: Any) -> None:
        message = venv._hung[1] if venv._hung is not None else "an env hung"
        with contextlib.suppress(Exception):
            os.write(
                2,
                (
                    f"\nerror: {message}. It could not be interrupted (stuck in native code), so "
                    f"this process ends (exit status {EXIT_STATUS}); the Python stack of each "
                    "thread follows\n"
                ).encode("utf-8", "replace"),
            )
            faulthandler.dump_traceback(file=2, all_threads=True)
        os._exit(EXIT_STATUS)


WATCHDOG = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG.after_fork)
