"""The in-process backend under envs that hang or crash: a hung ``step``/``reset`` becomes an
EnvWorkerError naming the env within ``worker_timeout``, one that cannot be interrupted ends
the process with a message, and a native crash's stack names the env that was stepping."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import EnvWorkerError
from rlblocks_env_dummy.dummy import DummyVectorEnv

#: How much later than worker_timeout a hang may be reported (the watchdog looks about every
#: quarter timeout; a loaded machine adds its share).
SLACK_S = 4.0

ENVS = textwrap.dedent("""
    import ctypes, os, time
    import gymnasium as gym

    class Faulty(gym.Wrapper):
        '''Env `bad` misbehaves (`mode`) on its third step or on its second reset.'''

        def __init__(self, index, bad, mode, when="step"):
            super().__init__(gym.make("CartPole-v1"))
            self.index, self.bad, self.mode, self.when = index, bad, mode, when
            self.steps = self.resets = 0

        def _misbehave(self):
            # a hang of a minute: long enough to be one, short enough that a test whose
            # watchdog misses it fails instead of blocking the suite
            if self.mode == "sleep":
                time.sleep(60)
            elif self.mode == "spin":  # a Python loop that swallows every Exception
                end = time.monotonic() + 60
                while time.monotonic() < end:
                    try:
                        sum(range(1000))
                    except Exception:
                        pass
            elif self.mode == "segv":
                ctypes.string_at(0)
            elif self.mode == "exit":
                os._exit(3)

        def step(self, action):
            self.steps += 1
            if self.index == self.bad and self.when == "step" and self.steps == 3:
                self._misbehave()
            return self.env.step(action)

        def reset(self, **kwargs):
            self.resets += 1
            if self.index == self.bad and self.when == "reset" and self.resets == 2:
                self._misbehave()
            return self.env.reset(**kwargs)
""")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The module above, importable here and by the scripts run in a child process."""
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "faulty_envs.py").write_text(ENVS)
    sys.path.insert(0, str(folder))
    try:
        import faulty_envs

        yield faulty_envs
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("faulty_envs", None)


def _envs(faulty: Any, mode: str, when: str = "step", **options: Any) -> DummyVectorEnv:
    fns = [lambda i=i: faulty.Faulty(i, 2, mode, when) for i in range(4)]
    return rlblocks.make_vector_env("dummy", fns, **options)


def _step_until_error(envs: DummyVectorEnv, steps: int = 5) -> tuple[EnvWorkerError, float]:
    start = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        for _ in range(steps):
            envs.step(np.zeros(4, dtype=np.int64))
    return info.value, time.monotonic() - start


@pytest.mark.parametrize("mode", ["sleep", "spin"])
def test_a_hung_step_is_an_error_naming_the_env_within_worker_timeout(faulty, mode) -> None:
    envs = _envs(faulty, mode, worker_timeout=1.0)
    try:
        envs.reset(seed=0)
        error, took = _step_until_error(envs)
        assert took < 1.0 + SLACK_S
        message = str(error)
        assert "env 2 (CartPole-v1) did not finish step within worker_timeout=1.0s" in message
        assert "env.backend=subproc" in message  # the way out: a worker per env
        # like any failed step: every env of it must be reset, then the set steps again
        with pytest.raises(EnvWorkerError, match="call reset"):
            envs.step(np.zeros(4, dtype=np.int64))
        envs.reset(np.array([0, 1, 3]), seed=1)
        envs.step(np.zeros(3, dtype=np.int64), env_ids=[0, 1, 3])
    finally:
        envs.close()


def test_a_hung_reset_is_named_too(faulty) -> None:
    envs = _envs(faulty, "sleep", when="reset", worker_timeout=1.0)
    try:
        envs.reset(seed=0)
        with pytest.raises(EnvWorkerError, match=r"env 2 .*did not finish reset within"):
            envs.reset([1, 2])
    finally:
        envs.close()


def test_a_hang_in_another_thread_is_interrupted(faulty) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        envs = _envs(faulty, "spin", worker_timeout=1.0)
        try:
            envs.reset(seed=0)
            for _ in range(5):
                envs.step(np.zeros(4, dtype=np.int64))
        except BaseException as exc:
            errors.append(exc)
        finally:
            envs.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(1.0 + SLACK_S + 5.0)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], EnvWorkerError)
    assert "env 2 (CartPole-v1) did not finish step" in str(errors[0])


def test_a_slow_step_within_the_timeout_is_left_alone() -> None:
    class Slow(gym.Wrapper):
        def step(self, action: Any) -> Any:
            time.sleep(0.6)
            return self.env.step(action)

    envs = DummyVectorEnv([lambda: Slow(gym.make("CartPole-v1"))] * 2, worker_timeout=2.0)
    try:
        envs.reset(seed=0)
        for _ in range(2):  # 1.2 s per vector step: the env, not the vector step, is timed
            envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close()


def test_worker_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="worker_timeout"):
        DummyVectorEnv([lambda: gym.make("CartPole-v1")], worker_timeout=0)
    from rlblocks.contracts import ConfigError

    with pytest.raises(ConfigError, match="worker_timeout"):
        rlblocks.make_vector_env("dummy", "CartPole-v1", worker_timeout=-1.0)


def test_a_run_with_a_hung_env_fails_with_the_error(faulty, tmp_path: Path) -> None:
    # every env of this run hangs (each is made as env 2)
    with pytest.raises(EnvWorkerError, match=r"env 0 .*did not finish step within "
                       r"worker_timeout=1.0s"):  # fmt: skip
        rlblocks.train(
            "dqn", env=lambda: faulty.Faulty(2, 2, "sleep"), run_dir=tmp_path / "run",
            overrides=["env.num_envs=4", "env.worker_timeout=1.0", "trainer.max_env_steps=500",
                       "trainer.warmup_steps=100"],
            progress=False, loggers=[], quiet=True,
        )  # fmt: skip


# -- beyond interruption: the process ends, and says why ---------------------------------------
SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import rlblocks
    import faulty_envs

    mode, where = sys.argv[1:3]

    def run():
        fns = [lambda i=i: faulty_envs.Faulty(i, 2, mode) for i in range(4)]
        envs = rlblocks.make_vector_env("dummy", fns, worker_timeout=1.0)
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(np.zeros(4, dtype=np.int64))

    if where == "thread":  # no signal reaches it: a sleep there cannot be interrupted
        t = threading.Thread(target=run)
        t.start()
        t.join()
    else:
        run()
    print("not reached")
""")


def _run_script(faulty: Any, mode: str, where: str = "main") -> subprocess.CompletedProcess:
    folder = Path(faulty.__file__).parent
    env = {"PYTHONPATH": f"{folder}:{':'.join(sys.path)}"}
    import os

    base = dict(os.environ)
    if where == "thread":
        # untraced: with any trace function in the threads (coverage's, which CI runs in every
        # subprocess, or a plain threading.settrace one), the watchdog thread stalls once it has
        # set the asynchronous exception that the sleeping thread cannot take (CPython 3.11
        # keeps the interpreter's eval breaker set while it is pending; the watchdog thread
        # then spins at 100% and never reaches its grace period), so the process is not ended
        base = {k: v for k, v in base.items() if not k.startswith("COVERAGE")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, where], capture_output=True, text=True,
        timeout=120, env={**base, **env},
    )  # fmt: skip


def test_a_hang_that_cannot_be_interrupted_ends_the_process_with_a_message(faulty) -> None:
    done = _run_script(faulty, "sleep", "thread")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "not reached" not in done.stdout
    assert "env 2 (CartPole-v1) did not finish step within worker_timeout=1.0s" in done.stderr
    assert "could not be interrupted" in done.stderr
    assert "faulty_envs.py" in done.stderr  # the stack of the thread it hung in


def test_a_native_crash_names_the_env_that_was_stepping(faulty) -> None:
    done = _run_script(faulty, "segv")
    assert done.returncode < 0, done.stderr[-2000:]  # killed by the signal
    assert "Segmentation fault" in done.stderr
    assert "<env 2, stepped in this process by the dummy backend" in done.stderr
    assert "env.backend=subproc" in done.stderr
