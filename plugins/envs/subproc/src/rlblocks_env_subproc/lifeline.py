"""Worker processes never outlive the process that started them.

A worker learns that its parent died in three ways, set up before it builds its envs:

- its command pipe reads as closed. A forked worker inherits a copy of every descriptor its
  parent holds, among them the parent's end of its own pipe and of every other worker's pipe
  (of this vector env and of any other in the process). While one copy is open, a pipe never
  reads as closed, so the worker lets go of them first (:func:`release_inherited`);
- a parent-death signal (Linux): the kernel sends SIGTERM when the parent dies, even to a
  worker stuck inside an env's native code;
- where that signal cannot serve, a watcher thread that ends the worker when the parent's end
  of its pipe closes (Linux), or else when its parent pid changes. The signal cannot serve when
  a thread other than the main one starts the worker (it fires when that *thread* ends), nor
  under ``forkserver``: the worker's parent is then the fork server, which lives as long as any
  of its children do.

A worker also lets go of the parent's stdout when it is a pipe (``rlblocks train ... | tee
log``): its stdout goes to stderr, so the reader of the pipe sees it end with the trainer.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import stat
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

#: ``prctl`` option that sets the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between two looks at the parent pid, where no parent-death signal can be set.
WATCH_INTERVAL_S = 0.5

# The parent's ends of every worker pipe open in this process, whichever vector env owns them:
# a worker forked later must release them all.
_parent_ends: weakref.WeakSet[Any] = weakref.WeakSet()


def register_parent_end(conn: Any) -> None:
    """Record the parent's end of a worker's pipe (a ``multiprocessing`` Connection), so that
    workers forked later release their copy of it."""
    _parent_ends.add(conn)


class Lifeline:
    """What a new worker needs to die with its parent; built in the parent right before the
    worker starts, picklable for every start method."""

    def __init__(self, context: str) -> None:
        # None: the worker's parent is a fork server, not this process
        self.parent_pid: int | None = None if context == "forkserver" else os.getpid()
        # only a forked child shares these descriptor numbers; spawned ones inherit none
        self.inherited: tuple[int, ...] = (
            tuple(c.fileno() for c in list(_parent_ends) if not c.closed)
            if context == "fork" else ()
        )
        self.death_signal = (
            self.parent_pid is not None
            and threading.current_thread() is threading.main_thread()
        )

    def attach(self, conn: Any) -> None:
        """Called first thing in the worker; ``conn`` is its end of the command pipe."""
        # a handler inherited from the parent (a trainer's "stop after this iteration") must
        # not keep the worker alive; Ctrl-C reaches the whole group and the parent decides
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        armed = self.death_signal and set_parent_death_signal(signal.SIGTERM)
        if armed and os.getppid() != self.parent_pid:  # it died before the signal was armed
            os._exit(1)
        release_inherited(self.inherited)
        if not armed:
            threading.Thread(
                target=_watch_parent, args=(conn.fileno(), self.parent_pid),
                name="rlblocks-parent-watch", daemon=True,
            ).start()
        keep_off_stdout_pipe()


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only);
    whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        return libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), zero, zero, zero) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(fd: int, parent_pid: int | None) -> None:
    """End this process when the peer of ``fd`` (the parent's end of the command pipe) closes,
    where poll can tell that without reading; else when the parent pid changes."""
    hang_up = getattr(select, "POLLRDHUP", None)
    if hang_up is not None:
        poller = select.poll()
        poller.register(fd, hang_up)  # not POLLIN: commands are the main thread's to read
        while not poller.poll():
            pass
    elif parent_pid is not None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
    else:  # the pipe reads as closed once the worker is idle: that has to do
        return
    os._exit(1)


def release_inherited(fds: Sequence[int]) -> None:
    """Let go of inherited descriptors: each becomes /dev/null, so the number stays taken and a
    stale object that closes it later cannot close something opened since."""
    if not fds:
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def keep_off_stdout_pipe() -> None:
    """When stdout is a pipe or socket, point it at stderr (or /dev/null without one): whoever
    reads the pipe (``| tee``) then sees it close when the trainer exits, whatever its
    workers do. Env output still shows, on stderr."""
    if not _is_pipe(1):
        return
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    try:
        os.fstat(2)
        os.dup2(2, 1)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
