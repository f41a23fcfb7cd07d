#!/usr/bin/env python
"""Off-policy gradient steps per second, rlblocks against Tianshou, on one device (a GPU above all).

What is timed is the learner alone, as a trainer drives it: ``policy.update(256, buffer)`` in
rlblocks and ``algorithm.update(buffer, 256)`` in Tianshou, on a replay buffer of random
HalfCheetah-v5-shaped transitions (17 observation floats, 6 action floats in [-1, 1]), each step
sampling a batch on the host, copying it to the device and taking the algorithm's optimizer
steps and target updates. Both libraries run the same learner (``--algo``), with its paper's
MuJoCo settings: 256-256 ReLU networks, Adam 3e-4, one-step targets (``--n-step``: n-step targets
in both libraries, each walking its buffer's episodes on the host as a trainer's step does),
tau 0.005, gamma 0.99, and

* ``sac``: two critics, a tanh-Gaussian actor, automatic entropy tuning (Haarnoja et al., 2018,
  table 1; Tianshou's MuJoCo example fixes alpha instead, which would spare it the temperature
  step);
* ``td3``: two critics, target smoothing noise 0.2 clipped at 0.5, an actor step every second
  step (Fujimoto et al., 2018);
* ``ddpg``: one critic, an actor step every step (the TD3 paper's re-tuned DDPG);
* ``redq``: ten critics, targets from a random two of them, an actor and temperature step every
  20th step (Chen et al., 2021, N = 10, M = 2, G = 20).

Contenders (``--frameworks``):

* ``rlblocks``: the eager step (``cuda_graph = false``);
* ``rlblocks-graph``: the same policy with ``cuda_graph = true``, the default (the step captured
  as a CUDA graph, one per phase of a delayed actor, and replayed; CUDA devices only, skipped
  elsewhere);
* ``tianshou``: Tianshou 2.x's algorithm of the same name, built as ``mujoco_benchmark.py``
  builds it from Tianshou's MuJoCo examples (REDQ as ``examples/mujoco/mujoco_redq.py`` builds
  its ensemble critic), moved to the device with ``.to(device)``.

Each contender runs in a fresh subprocess of this interpreter (no shared CUDA context, caches
or RNG), warms up ``--warmup`` steps, then times ``--rounds`` rounds of ``--updates`` steps
with the device synchronised at both ends of each round. Printed: the median steps/s of each
contender over its rounds, the spread (min-max), and each rlblocks contender's ratio to
Tianshou (above 1: rlblocks is faster).

Run: ``python contrib/benchmarks/update_rate.py --device cuda [--algo sac|td3|ddpg|redq]
[--frameworks rlblocks,rlblocks-graph,tianshou] [--updates 2000] [--rounds 5] [--n-step 1]
[--out rate.json]``; it needs ``tianshou`` for the peer column
(``contrib/benchmarks/requirements.txt``).
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
ALGOS = ("sac", "td3", "ddpg", "redq")
#: what every learner shares (the papers' MuJoCo settings), in both libraries
COMMON = {"hidden_sizes": [256, 256], "lr": 3e-4, "gamma": 0.99, "tau": 0.005}
#: each algorithm's own settings, in rlblocks' field names
OWN: dict[str, dict[str, Any]] = {
    "sac": {"auto_alpha": True},
    "td3": {"policy_noise": 0.2, "noise_clip": 0.5, "policy_delay": 2},
    "ddpg": {},
    "redq": {"ensemble_size": 10, "subset_size": 2, "actor_delay": 20, "auto_alpha": True},
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
        from rlblocks.replay import ReplayBuffer

        lr = COMMON["lr"]
        fields = dict(
            hidden_sizes=COMMON["hidden_sizes"], actor_lr=lr, critic_lr=lr, gamma=COMMON["gamma"],
            tau=COMMON["tau"], n_step=args.n_step, cuda_graph=fw == "rlblocks-graph",
            **OWN[args.algo],
        )  # fmt: skip
        if args.algo in ("sac", "redq"):
            fields["alpha_lr"] = lr
        policy = rlblocks.make_policy(args.algo, obs_space, act_space, device=str(device), **fields)
        buf = ReplayBuffer(args.buffer_size)
        buf.extend(data, env_ids=[0] * args.buffer_size)
        policy.train()

        def step() -> None:
            policy.update(args.batch_size, buf)

        rates = _time_rounds(step, sync, args)
        graph = getattr(policy, "_step_graph", None)
        captured = 0 if graph is None else graph.captured
        return {"rates": rates, "captured": captured, "library": rlblocks.__version__}

    import tianshou
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.data import Batch, ReplayBuffer

    class _Env:
        action_space = act_space

    algorithm = _tianshou_learner(args.algo, _Env(), obs_space.shape, act_space.shape, args)
    algorithm = algorithm.to(device)
    buf = ReplayBuffer(args.buffer_size)
    for i in range(args.buffer_size):
        buf.add(Batch(**{k: v[i] for k, v in data.items()}, info={}))
    algorithm.train()

    def ts_step() -> None:
        with policy_within_training_step(algorithm.policy):
            algorithm.update(buf, args.batch_size)

    rates = _time_rounds(ts_step, sync, args)
    return {"rates": rates, "captured": 0, "library": tianshou.__version__}


def _tianshou_learner(
    algo: str, env: Any, obs_shape: Any, act_shape: Any, args: argparse.Namespace
) -> Any:
    """Tianshou's algorithm object with the settings above."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mujoco_benchmark import TIANSHOU_EXAMPLES, _tianshou_algorithm

    own = OWN[algo]
    lr = COMMON["lr"]
    settings = dict(TIANSHOU_EXAMPLES.get(algo, {}))
    settings.update(
        hidden_sizes=COMMON["hidden_sizes"], actor_lr=lr, critic_lr=lr, alpha_lr=lr,
        gamma=COMMON["gamma"], tau=COMMON["tau"], n_step=args.n_step,
    )  # fmt: skip
    if algo == "sac":
        settings.update(auto_alpha=own["auto_alpha"])
    if algo == "td3":
        settings.update(
            policy_noise=own["policy_noise"], noise_clip=own["noise_clip"],
            update_actor_freq=own["policy_delay"],
        )  # fmt: skip
    if algo != "redq":
        return _tianshou_algorithm(algo, settings, env, obs_shape, act_shape, args.updates)

    import numpy as np
    from tianshou.algorithm import REDQ
    from tianshou.algorithm.modelfree.redq import REDQPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import EnsembleLinear, Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    hidden = settings["hidden_sizes"]

    def linear(x: int, y: int) -> EnsembleLinear:
        return EnsembleLinear(own["ensemble_size"], x, y)

    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
        action_shape=act_shape,
        unbounded=True,
        conditioned_sigma=True,
    )
    critic = ContinuousCritic(
        preprocess_net=Net(
            state_shape=obs_shape, action_shape=act_shape, hidden_sizes=hidden, concat=True,
            linear_layer=linear,
        ),
        linear_layer=linear,
        flatten_input=False,
    )  # fmt: skip
    alpha = AutoAlpha(-float(np.prod(act_shape)), 0.0, AdamOptimizerFactory(lr=lr))
    return REDQ(
        policy=REDQPolicy(actor=actor, action_space=env.action_space),
        policy_optim=AdamOptimizerFactory(lr=lr),
        critic=critic,
        critic_optim=AdamOptimizerFactory(lr=lr),
        ensemble_size=own["ensemble_size"],
        subset_size=own["subset_size"],
        tau=settings["tau"],
        gamma=settings["gamma"],
        alpha=alpha,
        n_step_return_horizon=args.n_step,
        actor_delay=own["actor_delay"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--algo", default="sac", choices=ALGOS)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--updates", type=int, default=2000, help="gradient steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--buffer-size", type=int, default=100_000)
    parser.add_argument("--obs-dim", type=int, default=17)
    parser.add_argument("--act-dim", type=int, default=6)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--n-step", type=int, default=1, help="n-step targets (both libraries)")
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
        for key in ("algo", "device", "updates", "rounds", "warmup", "batch_size", "buffer_size",
                    "obs_dim", "act_dim", "torch_threads", "n_step"):  # fmt: skip
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
            + (f"; {res['captured']} captured phase(s)" if res["captured"] else "")
            + ")",
            flush=True,
        )

    print(
        f"\n{args.algo.upper()} gradient steps/s on {device_name}, batch {args.batch_size}, "
        f"HalfCheetah-v5 shapes, {args.n_step}-step targets, median of {args.rounds} rounds "
        f"of {args.updates} steps"
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
