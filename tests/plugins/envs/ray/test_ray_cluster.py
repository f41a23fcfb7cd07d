"""The Ray backend on a cluster started separately (``ray start --head``), reached by address.

The cluster runs in its own process group with its own temp dir and is killed at the end; the
client runs in a fresh process (this one may hold the other module's Ray). Token authentication
is turned off for this private cluster: with it on, a driver needs the cluster's token
(``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``) to connect by address.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

pytest.importorskip("ray", reason="the Ray backend's tests need `pip install ray`")

CLIENT = textwrap.dedent("""
    import json, sys
    import ray
    from rlblocks.testing.env_checks import probe_env_fns
    from rlblocks_env_ray.ray_env import RayVectorEnv

    address = sys.argv[1]
    with RayVectorEnv(probe_env_fns(3), address=address, num_workers=2) as envs:
        obs, _ = envs.reset(seed=0)
        out = envs.step([envs.action_space.sample() for _ in range(3)])
        marker = ray.cluster_resources().get("rlblocks_test_head", 0)
        print(json.dumps({"started_ray": envs.started_ray, "obs": list(obs.shape),
                          "rew": len(out[1]), "marker": marker}))
    print(json.dumps({"still_connected": ray.is_initialized()}))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_connects_to_a_cluster_by_address_and_leaves_it_running() -> None:
    ray_bin = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    if not os.path.exists(ray_bin):
        pytest.skip("the `ray` command is not installed next to this Python")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rlbray")  # short: Ray puts sockets under it
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--temp-dir={temp}",
         '--resources={"rlblocks_test_head": 1}'],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while time.monotonic() < deadline:
            client = subprocess.run([sys.executable, "-c", CLIENT, address], env=env,
                                    capture_output=True, text=True, timeout=120)
            lines = [ln for ln in client.stdout.splitlines() if ln.startswith("{")]
            if client.returncode == 0 and lines:
                break
            assert head.poll() is None, "the Ray head exited while starting"
            time.sleep(2)  # the head may still be starting
        assert lines, client.stderr[-2000:]
        first, last = json.loads(lines[0]), json.loads(lines[-1])
        assert first["started_ray"] is False, "a cluster given by address is not ours to start"
        assert first["obs"][0] == 3 and first["rew"] == 3
        assert first["marker"] == 1, "connected to some other Ray than the one started here"
        assert last["still_connected"] is True
        assert head.poll() is None, "closing the vector env must leave the cluster running"
    finally:
        with_group = os.getpgid(head.pid) if head.poll() is None else None
        if with_group is not None:
            os.killpg(with_group, signal.SIGTERM)
            try:
                head.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(with_group, signal.SIGKILL)
                head.wait(5)
        shutil.rmtree(temp, ignore_errors=True)
