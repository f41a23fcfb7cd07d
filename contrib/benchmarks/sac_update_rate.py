#!/usr/bin/env python
"""SAC's gradient steps per second, rlblocks against Tianshou, on one device (a GPU above all).

What is timed is the learner alone, as a trainer drives it: ``policy.update(256, buffer)`` in
rlblocks and ``algorithm.update(buffer, 256)`` in Tianshou, on a replay buffer of random
HalfCheetah-v5-shaped transitions (17 observation floats, 6 action floats in [-1, 1]), each step
sampling a batch on the host, copying it to the device and taking the critic, actor and
temperature steps and the target update. Both libraries use the same SAC: two 256-256 ReLU
critics and a 256-256 tanh-Gaussian actor, Adam 3e-4 for all three optimizers, automatic
entropy tuning, one-step targets, tau 0.005, gamma 0.99 (the SAC paper's MuJoCo settings;
Tianshou's MuJoCo example fixes alpha instead, which would spare it the temperature step).

Contenders (``--frameworks``):

* ``rlblocks``: the eager step (what ``rlblocks train sac`` runs by default);
* ``rlblocks-graph``: the same policy with ``cuda_graph=True`` (the step captured once as a
  CUDA graph and replayed; CUDA devices only, skipped elsewhere);
* ``tianshou``: Tianshou 2.x's ``SAC`` built as ``mujoco_benchmark.py`` builds it from
  ``examples/mujoco/mujoco_sac.py``, moved to the device with ``.to(device)``.

Each contender runs in a fresh subprocess of this interpreter (no shared CUDA context, caches
or RNG), warms up ``--warmup`` steps, then times ``--rounds`` rounds of ``--updates`` steps
with the device synchronised at both ends of each round. Printed: the median steps/s of each
contender over its rounds, the spread (min-max), and each rlblocks contender's ratio to
Tianshou (above 1: rlblocks is faster).

Run: ``python contrib/benchmarks/sac_update_rate.py --device cuda [--frameworks
rlblocks,rlblocks-graph,tianshou] [--updates 2000] [--rounds 5] [--out rate.json]``; it needs
``tianshou`` for the peer column (``contrib/benchmarks/requirements.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

FRAMEWORKS = ("rlblocks", "rlblocks-graph", "tianshou")
SAC = {  # the SAC paper's MuJoCo settings (Haarnoja et al., 2018, table 1), both libraries
    "hidden_sizes": [256, 256],
    "lr": 3e-4,
    "gamma": 0.99,
    "tau": 0.005,
}


def _spaces(obs_dim: int, act_dim: int) -> tuple[Any, Any]:
    import gymnasium as gym
    import numpy as np

    obs = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), dtype=np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (act_dim,), dtype=np.float32)
    return obs, act


def _transitions(n: int, obs_dim: int, act_dim: int, seed: int = 0) -> dict[str, Any]:
    """``n`` random transitions in episodes of 1,000 steps (time limit, no termination)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n + 1, obs_dim)).astype(np.float32)
    truncated = np.zeros(n, dtype=bool)
    truncated[999::1000] = True
    return {
        "obs": obs[:-1],
        "act": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
        "rew": rng.normal(size=n).astype(np.float32),
        "terminated": np.zeros(n, dtype=bool),
        "truncated": truncated,
        "obs_next": obs[1:],
    }


def _time_rounds(step: Any, sync: Any, args: argparse.Namespace) -> list[float]:
    for _ in range(args.warmup):
        step()
    sync()
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(args.updates):
            step()
        sync()
        rates.append(args.updates / (time.perf_counter() - t0))
    return rates


def trial(fw: str, args: argparse.Namespace) -> dict[str, Any]:
    """One contender's rounds (run in the child process)."""
    import torch

    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    obs_space, act_space = _spaces(args.obs_dim, args.act_dim)
    data = _transitions(args.buffer_size, args.obs_dim, args.act_dim)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if fw.startswith("rlblocks"):
        import rlblocks
        from rlblocks.buffer import ReplayBuffer

        policy = rlblocks.make_policy(
            "sac", obs_space, act_space, device=str(device),
            hidden_sizes=SAC["hidden_sizes"], actor_lr=SAC["lr"], critic_lr=SAC["lr"],
            alpha_lr=SAC["lr"], gamma=SAC["gamma"], tau=SAC["tau"], n_step=1, auto_alpha=True,
            cuda_graph=fw == "rlblocks-graph",
        )  # fmt: skip
        buf = ReplayBuffer(args.buffer_size)
        buf.extend(data, env_ids=[0] * args.buffer_size)
        policy.train()

        def step() -> None:
            policy.update(args.batch_size, buf)

        rates = _time_rounds(step, sync, args)
        graph = getattr(policy, "_step_graph", None)
        captured = graph is not None and graph._graph is not None
        return {"rates": rates, "captured": captured, "library": rlblocks.__version__}

    import tianshou
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.data import Batch, ReplayBuffer

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mujoco_benchmark import TIANSHOU_EXAMPLES, _tianshou_algorithm

    settings = dict(TIANSHOU_EXAMPLES["sac"])
    settings.update(
        hidden_sizes=SAC["hidden_sizes"], actor_lr=SAC["lr"], critic_lr=SAC["lr"],
        alpha_lr=SAC["lr"], gamma=SAC["gamma"], tau=SAC["tau"], n_step=1, auto_alpha=True,
    )  # fmt: skip

    class _Env:
        action_space = act_space

    algorithm = _tianshou_algorithm(
        "sac", settings, _Env(), obs_space.shape, act_space.shape, args.updates
    ).to(device)
    buf = ReplayBuffer(args.buffer_size)
    for i in range(args.buffer_size):
        buf.add(Batch(**{k: v[i] for k, v in data.items()}, info={}))
    algorithm.train()

    def ts_step() -> None:
        with policy_within_training_step(algorithm.policy):
            algorithm.update(buf, args.batch_size)

    rates = _time_rounds(ts_step, sync, args)
    return {"rates": rates, "captured": False, "library": tianshou.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--updates", type=int, default=2000, help="gradient steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--buffer-size", type=int, default=100_000)
    parser.add_argument("--obs-dim", type=int, default=17)
    parser.add_argument("--act-dim", type=int, default=6)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", default="", help="also write the results here as JSON")
    parser.add_argument("--trial", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.trial:
        print(json.dumps(trial(args.trial, args)))
        return 0

    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown frameworks {unknown}; choose from {list(FRAMEWORKS)}")
    if not args.device.startswith("cuda") and "rlblocks-graph" in frameworks:
        print("rlblocks-graph skipped: CUDA graphs need a CUDA device", flush=True)
        frameworks.remove("rlblocks-graph")

    device_name = args.device
    if args.device.startswith("cuda"):
        import torch

        device_name = f"{args.device} ({torch.cuda.get_device_name(torch.device(args.device))})"
    results: dict[str, Any] = {}
    for fw in frameworks:
        cmd = [sys.executable, os.path.abspath(__file__), "--trial", fw]
        for key in ("device", "updates", "rounds", "warmup", "batch_size", "buffer_size",
                    "obs_dim", "act_dim", "torch_threads"):  # fmt: skip
            cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{fw}: failed\n{proc.stderr[-3000:]}", flush=True)
            results[fw] = {"error": proc.stderr[-3000:]}
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["median"] = statistics.median(res["rates"])
        results[fw] = res
        print(
            f"{fw:15s} {res['median']:9.1f} steps/s  (rounds {min(res['rates']):.1f}-"
            f"{max(res['rates']):.1f}; {res['library']}"
            + ("; captured" if res["captured"] else "")
            + ")",
            flush=True,
        )

    print(
        f"\nSAC gradient steps/s on {device_name}, batch {args.batch_size}, HalfCheetah-v5 "
        f"shapes, median of {args.rounds} rounds of {args.updates} steps"
    )
    print("| contender | steps/s (median) | range | vs Tianshou |")
    print("| --- | ---: | --- | ---: |")
    peer = results.get("tianshou", {}).get("median")
    for fw, res in results.items():
        if "median" not in res:
            print(f"| {fw} | failed | | |")
            continue
        ratio = f"{res['median'] / peer:.2f}x" if peer and fw != "tianshou" else ""
        rng = f"{min(res['rates']):.0f}-{max(res['rates']):.0f}"
        print(f"| {fw} | {res['median']:.0f} | {rng} | {ratio} |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": device_name, "args": vars(args), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
