"""Env actors never outlive the driver, and a Ray the backend started stops with it.

Each test runs a trainer-like driver (a script stepping a Ray vector env in a loop, on a private
local Ray the backend starts) in its own process, kills it, and looks for what it left behind.
Starting Ray costs seconds, hence ``slow``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend's tests need `pip install ray`")
psutil = pytest.importorskip("psutil")  # Ray depends on it

from rlblocks.contracts import ConfigError  # noqa: E402
from rlblocks.testing.env_checks import probe_env_fns  # noqa: E402
from rlblocks_env_ray.ray_env import RayVectorEnv  # noqa: E402
from rlblocks_env_ray.session import _running_local_address  # noqa: E402

#: How long env actors may take to go once the driver is gone.
GRACE_S = 5.0

DRIVER = textwrap.dedent("""
    import json, os, signal
    import numpy as np
    import rlblocks

    if __name__ == "__main__":
        # started from a shell's background job, Python inherits SIGINT ignored: interrupt
        # as a terminal would, whatever the test runner was started from
        signal.signal(signal.SIGINT, signal.default_int_handler)
        envs = rlblocks.make_vector_env(
            "ray", "CartPole-v1", num_envs=4, seed=0, num_workers=2,
            init_kwargs={"num_cpus": 2, "log_to_driver": False})
        assert envs.started_ray
        print(json.dumps(envs.worker_pids), flush=True)
        while True:
            _, _, term, trunc, _ = envs.step(np.zeros(4, dtype=np.int64))
            done = np.flatnonzero(term | trunc)
            if len(done):
                envs.reset(done)
""")


def _gone(procs: list[Any], within: float) -> list[Any]:
    """The processes of ``procs`` still running (not zombies) after up to ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        alive = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _reaches_eof(stream: Any, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = max(0.0, deadline - time.monotonic())
        if select.select([stream], [], [], left)[0] and not os.read(stream.fileno(), 65536):
            return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=lambda s: s.name)
def test_env_actors_and_the_ray_started_here_die_with_the_driver(
    tmp_path: Path, sig: signal.Signals
) -> None:
    if _running_local_address(None) is not None:
        pytest.skip("a Ray from `ray start` or RAY_ADDRESS is up: the driver would use it")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    log = tmp_path / "driver.err"
    # the driver runs unmeasured: coverage's exit handling in a process that gets SIGINT can
    # outlast any grace period, and what is tested here is the processes' lifetime
    env = {k: v for k, v in os.environ.items()
           if k != "RAY_ADDRESS" and not k.startswith("COVERAGE_")}  # fmt: skip
    with open(log, "wb") as err:
        driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                  stderr=err, env=env, start_new_session=True)
    started: list[Any] = []
    try:
        ready, _, _ = select.select([driver.stdout], [], [], 180)
        line = driver.stdout.readline() if ready else b""
        assert line, f"the driver did not start:\n{log.read_text()[-3000:]}"
        actors = [psutil.Process(pid) for pid in json.loads(line)]
        started = psutil.Process(driver.pid).children(recursive=True)
        os.kill(driver.pid, sig)
        if sig == signal.SIGKILL:  # `| tee`: nothing of Ray's keeps the driver's stdout open
            assert _reaches_eof(driver.stdout, GRACE_S), "Ray holds the driver's stdout"
        driver.wait(120)  # a graceful shutdown of Ray may be slow on a loaded machine
        left = _gone(actors, GRACE_S)
        assert not left, f"env actors {left} outlived the driver's {sig.name} by {GRACE_S} s"
        if sig != signal.SIGKILL:  # the driver could still shut its Ray down
            left = _gone(started, 15.0)
            assert not left, f"the Ray the driver started outlived it: {left}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
        driver.wait()
        driver.stdout.close()
        # after SIGKILL Ray's agents take up to a minute to notice: not ours to wait for
        for p in _gone(started, 0.0):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def test_detached_env_actors_are_refused() -> None:
    with pytest.raises(ConfigError, match="detached"):
        RayVectorEnv(probe_env_fns(2), actor_options={"lifetime": "detached"})
