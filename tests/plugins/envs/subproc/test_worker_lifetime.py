"""Worker processes of the multi-process backends (subproc, and shmem which reuses its workers)
never outlive the trainer, and with the default options every env is isolated in one: a crash
or a hang is an EnvWorkerError naming the env, restarts are counted and limited.

The lifetime tests run a trainer-like parent (a script stepping a vector env in a loop) in its
own process, kill it, and look for its workers among the processes it left behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import EnvWorkerError
from rlblocks.testing.env_checks import ProbeEnv, probe_env_fns
from rlblocks_env_subproc.subproc import SubprocVectorEnv

BACKENDS = ("subproc", "shmem")
#: How long workers may take to go once their parent is gone.
GRACE_S = 5.0

PARENT = textwrap.dedent("""
    import signal, sys, threading, time
    import gymnasium as gym
    import numpy as np
    import rlblocks

    class HangingEnv(gym.Wrapper):
        def step(self, action):
            time.sleep(10_000)

    def hanging():
        return HangingEnv(gym.make("CartPole-v1"))

    if __name__ == "__main__":
        # started from a shell's background job, Python inherits SIGINT ignored: interrupt
        # as a terminal would, whatever the test runner was started from
        signal.signal(signal.SIGINT, signal.default_int_handler)
        backend, mode, context = sys.argv[1:4]
        env = [hanging] * 4 if mode != "step" else "CartPole-v1"
        options = {} if context == "default" else {"context": context}
        made = []
        build = lambda: made.append(
            rlblocks.make_vector_env(backend, env, num_envs=4, **options))
        if mode == "thread":  # no parent-death signal: the worker's watcher must do
            t = threading.Thread(target=build)
            t.start()
            t.join()
        else:
            build()
        envs = made[0]
        envs.reset(seed=0)
        print("ready", flush=True)
        while True:
            _, _, term, trunc, _ = envs.step(np.zeros(4, dtype=np.int64))
            done = np.flatnonzero(term | trunc)
            if len(done):
                envs.reset(done)
""")


# -- processes ---------------------------------------------------------------------------------
def _descendants(pid: int) -> list[tuple[int, float]]:
    """``(pid, start time)`` of every process below ``pid``: psutil when installed, else a
    scan of /proc."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return [(p.pid, p.create_time()) for p in psutil.Process(pid).children(recursive=True)]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        stat = _stat(int(entry)) if entry.isdigit() else None
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        stat = _stat(child)
        if stat is not None:
            found.append((child, float(stat[19])))
            todo += children.get(child, [])
    return found


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, ... (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _alive(proc: tuple[int, float]) -> bool:
    """Whether this very process (not a later one with its pid) still runs; zombies count as
    gone: nothing runs in them, and the reaper of the container may be slow to collect them."""
    pid, started = proc
    try:
        import psutil
    except ImportError:
        stat = _stat(pid)
        return stat is not None and stat[0] != "Z" and float(stat[19]) == started
    try:
        p = psutil.Process(pid)
        return p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _survivors(procs: list[tuple[int, float]], within: float) -> list[tuple[int, float]]:
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in procs if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _read_line(stream: Any, within: float) -> bytes:
    deadline = time.monotonic() + within
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        if select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(stream.fileno(), 1)
            if not chunk:
                break
            line += chunk
    return line


def _reaches_eof(stream: Any, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = max(0.0, deadline - time.monotonic())
        if select.select([stream], [], [], left)[0] and not os.read(stream.fileno(), 65536):
            return True
    return False


@contextlib.contextmanager
def _trainer(tmp_path: Path, backend: str, mode: str = "step", context: str = "default") -> Any:
    """A trainer-like parent with its stdout on a pipe: ``(process, its workers)`` once it
    steps. Whatever the test does, nothing it started is left running."""
    script = tmp_path / "trainer.py"
    script.write_text(PARENT)
    log = tmp_path / "trainer.err"
    with open(log, "wb") as err:
        # the trainer runs unmeasured: coverage's exit handling in a process that gets SIGINT
        # can outlast any grace period, and what is tested here is the processes' lifetime
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
        parent = subprocess.Popen(
            [sys.executable, str(script), backend, mode, context],
            stdout=subprocess.PIPE, stderr=err, start_new_session=True, env=env,
        )
    workers: list[tuple[int, float]] = []
    try:
        line = _read_line(parent.stdout, 60.0)
        assert line == b"ready\n", f"the trainer did not start:\n{log.read_text()[-3000:]}"
        if mode != "step":
            time.sleep(0.5)  # let the step reach the hanging env
        workers = _descendants(parent.pid)
        assert workers, "the trainer has no worker processes"
        yield parent, workers
    finally:
        with contextlib.suppress(ProcessLookupError):
            parent.kill()
        parent.wait()
        for pid, _ in _survivors(workers, 0.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.stdout.close()


# -- workers never outlive the trainer -------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_die_with_the_trainer(tmp_path: Path, backend: str, sig: signal.Signals) -> None:
    with _trainer(tmp_path, backend) as (parent, workers):
        os.kill(parent.pid, sig)
        parent.wait(120)  # a graceful exit may be slow on a loaded machine
        left = _survivors(workers, GRACE_S)
        assert not left, f"workers {left} outlived the trainer's {sig.name} by {GRACE_S} s"


@pytest.mark.parametrize("backend", BACKENDS)
def test_trainer_stdout_pipe_closes_when_it_is_killed(tmp_path: Path, backend: str) -> None:
    # `rlblocks train ... | tee log`: tee exits when the last holder of the pipe does
    with _trainer(tmp_path, backend) as (parent, _):
        parent.kill()
        assert _reaches_eof(parent.stdout, GRACE_S), "the workers hold the trainer's stdout"


@pytest.mark.parametrize(("mode", "context"), [
    ("hang", "default"),  # a worker stuck in an env: only the parent-death signal reaches it
    ("thread", "default"),  # no signal when a thread starts workers: the watcher thread
    ("hang", "forkserver"),  # the fork server dies with the trainer, its children with it
    ("step", "spawn"),
])
def test_workers_die_with_the_trainer_whatever_they_are_doing(
    tmp_path: Path, mode: str, context: str
) -> None:
    with _trainer(tmp_path, "subproc", mode, context) as (parent, workers):
        parent.kill()
        parent.wait(120)  # a graceful exit may be slow on a loaded machine
        assert not _survivors(workers, GRACE_S)


def test_workers_started_by_a_thread_that_ended_keep_serving() -> None:
    # the parent-death signal fires when the starting *thread* ends: not used from threads
    made: list[SubprocVectorEnv] = []
    t = threading.Thread(target=lambda: made.append(SubprocVectorEnv(probe_env_fns(2))))
    t.start()
    t.join()
    with made[0] as envs:
        time.sleep(0.3)
        obs, _ = envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert obs[:, 1].tolist() == [1, 1]


# -- isolation by default --------------------------------------------------------------------
class CrashingEnv(ProbeEnv):
    """Env 2 crashes (``segv``) or hangs (``hang``) on its second step, every episode."""

    def __init__(self, index: int, mode: str) -> None:
        super().__init__(index)
        self.length = 100
        self.mode = mode

    def step(self, action: Any) -> Any:
        out = super().step(action)
        if self.index == 2 and self._state[1] == 2:
            if self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.mode == "hang":
                time.sleep(10_000)
        return out


def _crashing(backend: str, mode: str, **options: Any) -> Any:
    fns = [functools.partial(CrashingEnv, i, mode) for i in range(4)]
    envs = rlblocks.make_vector_env(backend, fns, **options)
    # an env left in this process would take the test process down with it
    assert envs.local_envs == 0, "by default every env steps in a worker process"
    return envs


@pytest.mark.parametrize("backend", BACKENDS)
def test_segfaulting_env_is_an_error_naming_the_env_and_signal(backend: str) -> None:
    with _crashing(backend, "segv") as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match=r"env 2 in env worker \d+ .*SIGSEGV"):
            envs.step(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hanging_env_is_an_error_within_worker_timeout(backend: str) -> None:
    with _crashing(backend, "hang", worker_timeout=1.0) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        start = time.monotonic()
        with pytest.raises(EnvWorkerError, match=r"env 2 in env worker \d+ .*did not answer "
                           r"step within worker_timeout=1.0s"):
            envs.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - start < 1.0 + 4.0


def test_hanging_env_in_async_step_is_named_too() -> None:
    with _crashing("shmem", "hang", worker_timeout=1.0) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        envs.step_async(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match=r"env 2 in env worker .*worker_timeout=1.0s"):
            while True:
                envs.step_wait()


# -- restarts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_restarts_are_reported_counted_and_limited(backend: str) -> None:
    with _crashing(backend, "segv", restart_failed=True, max_restarts=2) as envs:
        envs.reset()
        for count in (1, 2):
            envs.step(np.zeros(4, dtype=np.int64))
            with pytest.warns(RuntimeWarning, match=rf"env 2 in env worker \d+ .*SIGSEGV.*"
                              rf"restart {count} of max_restarts=2") as record:
                _, _, _, trunc, _ = envs.step(np.zeros(4, dtype=np.int64))
            assert len(record) == 1
            assert trunc[2], "the crashed env's step comes back truncated"
            envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match=r"env 2 .*SIGSEGV.*restarted 2 times "
                           r"\(max_restarts=2\)"):
            envs.step(np.zeros(4, dtype=np.int64))
