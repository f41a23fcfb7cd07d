"""Processes a command starts for its runs (``--seeds``) never outlive it.

A child learns that its parent died in two ways, set up first thing:

- a parent-death signal (Linux): the kernel sends SIGKILL when the parent dies, even to a child
  stuck in native code. It ends the child at once; its run resumes from its last checkpoint,
  and its own env workers die with it (they watch their parent the same way);
- a watcher thread that reads the parent's control pipe: end of file means every copy of the
  parent's end is closed, i.e. the parent is gone (everywhere, Linux or not). Until then the
  pipe brings the parent's requests: the name of a signal asks the run to stop after its current
  iteration, as that signal would stop a run of its own (:class:`StopRequest`).

On SIGINT or SIGTERM the parent itself asks each child over that pipe, so a child is asked once
even when a Ctrl-C at the terminal reached the whole process group; a second signal kills them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from rlblocks.plugins import hookimpl

#: ``prctl`` option that sets the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent (the thread that started
    it) dies (Linux only); whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        return libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), zero, zero, zero) == 0
    except (OSError, AttributeError):
        return False


class StopRequest:
    """A hook that stops the run after its current iteration once the parent asked
    (:attr:`reason` set), at the first rollout, update log or test that follows."""

    def __init__(self) -> None:
        self.reason = ""

    def _apply(self, trainer: Any) -> None:
        if self.reason and trainer is not None and not trainer.stop_requested:
            trainer.request_stop(self.reason)

    @hookimpl
    def rlblocks_rollout_end(self, trainer: Any) -> None:
        self._apply(trainer)

    @hookimpl
    def rlblocks_update_end(self, trainer: Any) -> None:
        self._apply(trainer)

    @hookimpl
    def rlblocks_test_end(self, trainer: Any) -> None:
        self._apply(trainer)


def attach_to_parent(parent_pid: int, control: Any) -> StopRequest:
    """Called first thing in a child: die with the parent ``parent_pid``; ``control`` is the
    child's end of the parent's control pipe (a ``multiprocessing`` Connection). Returns the
    hook that carries the parent's stop requests into the child's run."""
    # Ctrl-C reaches the whole process group; before the run handles SIGINT itself, the parent
    # (which got it too) decides, and asks over the pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if set_parent_death_signal(signal.SIGKILL) and os.getppid() != parent_pid:
        os._exit(1)  # it died before the signal was armed
    stop = StopRequest()
    threading.Thread(
        target=_listen, args=(control, stop), name="rlblocks-parent-watch", daemon=True
    ).start()
    return stop


def _listen(control: Any, stop: StopRequest) -> None:
    while True:
        try:
            name = control.recv()
        except (EOFError, OSError):
            os._exit(1)  # the parent is gone
        stop.reason = f"interrupted by {name}"


@contextlib.contextmanager
def stop_signals(received: list[str]) -> Iterator[None]:
    """While the parent waits for its children: SIGINT and SIGTERM append their name to
    ``received`` (the waiting loop acts on it) instead of ending the parent. In a thread other
    than the main one, signals stay as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
