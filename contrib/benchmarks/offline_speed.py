#!/usr/bin/env python
"""Offline gradient steps per second on one CPU thread: rlblocks against Tianshou and d3rlpy.

What is timed is the learner as an offline trainer drives it, one gradient step after another
on a fixed dataset: ``policy.update(batch, buffer)`` in rlblocks, ``algorithm.update(buffer,
batch)`` in Tianshou 2.x (inside its training-step context) and ``algo.update(
dataset.sample_transition_batch(batch))`` in d3rlpy 2.x. Every step samples its batch on the
host and takes all of the algorithm's optimizer steps and target updates; what each library
logs per step is part of its step. The dataset is Pendulum-v1-shaped (3 observation floats, 1
action in [-1, 1]), random transitions in episodes of 200 steps: a step's cost does not depend
on what the data means.

Algorithms (``--algos``): ``bc`` (deterministic, mean squared error), ``bcq``, ``cql``, ``iql``,
``crr``, ``td3bc``. Tianshou has BC, BCQ, CQL and TD3+BC; d3rlpy all six. Two size settings
(``--sizes``):

* ``default``: each library with its own defaults for the algorithm (network sizes, batch size,
  sampled actions, as its config classes or, for Tianshou, its ``examples/offline/d4rl_*.py``
  scripts set them);
* ``equal``: every network two hidden layers of 256 ReLU units (BCQ's VAE too, its latent twice
  the action dimension), batch 256, 10 sampled actions for CQL's penalty and BCQ's target, 4
  for CRR's advantage, CQL with its Lagrange multiplier (as Tianshou's example and d3rlpy
  run it).

Every library takes one-step targets. rlblocks' CQL runs with ``bc_steps=0`` (its behaviour-
cloning warm start is a different step: what is timed is the step of the rest of training, the
one the peers take). Contenders of one algorithm run at once, each in its own process with
``torch.set_num_threads(1)``, built and warmed up first; then each repeat times one round of
``--seconds`` of steps per contender, one contender at a time (the others wait, idle), the
order rotating every repeat, so that load from other jobs on the machine hits every contender
alike. Printed: the median steps/s over the repeats of each contender, their range, and per
algorithm and size setting the ratio of rlblocks to the faster peer (above 1: rlblocks is
faster) against the 2x target at equal sizes.

Run (from the repository root, with the peers installed as README.md "Setup" says)::

    .venv-bench/bin/python contrib/benchmarks/offline_speed.py   # about 20 minutes on 2 busy cores
    .venv-bench/bin/python contrib/benchmarks/offline_speed.py --algos cql,iql --sizes equal \\
        --repeats 7 --seconds 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ALGOS = ("bc", "bcq", "cql", "iql", "crr", "td3bc")
FRAMEWORKS = ("rlblocks", "tianshou", "d3rlpy")
SIZES = ("default", "equal")
#: the algorithms each peer ships
HAS = {
    "rlblocks": set(ALGOS),
    "tianshou": {"bc", "bcq", "cql", "td3bc"},
    "d3rlpy": set(ALGOS),
}
OBS_DIM, ACT_DIM, EPISODE = 3, 1, 200
HIDDEN = [256, 256]
#: what starts a worker's answer on its stdout (the libraries print lines of their own)
MARK = "@@offline_speed "
EQUAL_BATCH = 256
#: sampled actions at equal sizes: CQL's penalty, BCQ's target, CRR's advantage
SAMPLES = {"cql": 10, "bcq": 10, "crr": 4}
#: each library's default batch per algorithm (rlblocks: its specs' trainer.batch_size;
#: d3rlpy: its config classes; Tianshou: its d4rl_*.py examples)
DEFAULT_BATCH = {
    "rlblocks": {"bc": 100, "bcq": 100, "cql": 256, "iql": 256, "crr": 256, "td3bc": 256},
    "tianshou": {"bc": 256, "bcq": 256, "cql": 256, "td3bc": 256},
    "d3rlpy": {"bc": 100, "bcq": 100, "cql": 256, "iql": 256, "crr": 100, "td3bc": 256},
}


def _data(n: int, seed: int = 0) -> dict[str, Any]:
    """``n`` random transitions in episodes of ``EPISODE`` steps (time limit, no termination)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n + 1, OBS_DIM)).astype(np.float32)
    truncated = np.zeros(n, dtype=bool)
    truncated[EPISODE - 1 :: EPISODE] = True
    return {
        "obs": obs[:-1],
        "act": rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
        "rew": rng.normal(size=n).astype(np.float32),
        "terminated": np.zeros(n, dtype=bool),
        "truncated": truncated,
        "obs_next": obs[1:],
    }


# -- rlblocks ------------------------------------------------------------------------------------
def _rlblocks(algo: str, equal: bool, data: dict[str, Any], batch: int) -> Any:
    import gymnasium as gym
    import numpy as np

    import rlblocks
    from rlblocks.replay import ReplayBuffer

    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), dtype=np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), dtype=np.float32)
    fields: dict[str, Any] = {"cql": {"bc_steps": 0}}.get(algo, {})
    if equal:
        fields["hidden_sizes"] = HIDDEN
        if algo == "bcq":
            fields.update(vae_hidden_sizes=HIDDEN, num_sampled_actions=SAMPLES["bcq"])
        if algo == "cql":
            fields.update(num_sampled_actions=SAMPLES["cql"], with_lagrange=True)
        if algo == "crr":
            fields.update(num_action_samples=SAMPLES["crr"])
    policy = rlblocks.make_policy(algo, obs_space, act_space, **fields)
    buf = ReplayBuffer(len(data["obs"]))
    buf.extend(data, env_ids=[0] * len(data["obs"]))
    policy.train()
    return lambda: policy.update(batch, buf), rlblocks.__version__


# -- Tianshou --------------------------------------------------------------------------------------
def _tianshou(algo: str, equal: bool, data: dict[str, Any], batch: int) -> Any:
    import gymnasium as gym
    import numpy as np
    import tianshou
    from tianshou.algorithm import BCQ, CQL, TD3BC
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.algorithm.imitation.bcq import BCQPolicy
    from tianshou.algorithm.imitation.imitation_base import (
        ImitationPolicy,
        OfflineImitationLearning,
    )
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import ReplayBuffer
    from tianshou.exploration import GaussianNoise
    from tianshou.utils.net.common import MLP, Net
    from tianshou.utils.net.continuous import (
        VAE,
        ContinuousActorDeterministic,
        ContinuousActorProbabilistic,
        ContinuousCritic,
        Perturbation,
    )

    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), dtype=np.float32)
    obs_shape, act_shape = (OBS_DIM,), (ACT_DIM,)
    hidden = HIDDEN  # every d4rl_*.py example of Tianshou 2.0.1 defaults to 256-256

    def critic() -> Any:
        return ContinuousCritic(
            preprocess_net=Net(
                state_shape=obs_shape, action_shape=act_shape, hidden_sizes=hidden, concat=True
            )
        )

    algorithm: Any
    if algo == "bc":  # d4rl_il.py: lr 1e-4
        actor = ContinuousActorDeterministic(
            preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
            action_shape=act_shape, max_action=1.0,
        )  # fmt: skip
        algorithm = OfflineImitationLearning(
            policy=ImitationPolicy(actor=actor, action_space=act_space, action_scaling=True),
            optim=AdamOptimizerFactory(lr=1e-4),
        )
    elif algo == "bcq":  # d4rl_bcq.py: VAE 512-512 (equal: 256-256), latent 2 * act_dim
        vae_hidden = hidden if equal else [512, 512]
        latent = 2 * ACT_DIM
        vae = VAE(
            encoder=MLP(input_dim=OBS_DIM + ACT_DIM, hidden_sizes=vae_hidden),
            decoder=MLP(
                input_dim=OBS_DIM + latent, output_dim=ACT_DIM, hidden_sizes=vae_hidden
            ),
            hidden_dim=vae_hidden[-1], latent_dim=latent, max_action=1.0,
        )  # fmt: skip
        perturbation = Perturbation(
            preprocess_net=MLP(
                input_dim=OBS_DIM + ACT_DIM, output_dim=ACT_DIM, hidden_sizes=hidden
            ),
            max_action=1.0, phi=0.05,
        )  # fmt: skip
        algorithm = BCQ(
            policy=BCQPolicy(
                actor_perturbation=perturbation, action_space=act_space, critic=critic(), vae=vae
            ),
            actor_perturbation_optim=AdamOptimizerFactory(lr=1e-3),
            critic_optim=AdamOptimizerFactory(lr=1e-3),
            vae_optim=AdamOptimizerFactory(),
            critic2=critic(),
            critic2_optim=AdamOptimizerFactory(lr=1e-3),
            gamma=0.99, tau=0.005, lmbda=0.75, num_sampled_action=SAMPLES["bcq"],
        )  # fmt: skip
    elif algo == "cql":  # d4rl_cql.py: Lagrange on, threshold 10, calibrated, 10 actions
        actor = ContinuousActorProbabilistic(
            preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
            action_shape=act_shape, unbounded=True, conditioned_sigma=True,
        )  # fmt: skip
        algorithm = CQL(
            policy=SACPolicy(actor=actor, action_space=act_space),
            policy_optim=AdamOptimizerFactory(lr=1e-4),
            critic=critic(),
            critic_optim=AdamOptimizerFactory(lr=3e-4),
            critic2=critic(),
            critic2_optim=AdamOptimizerFactory(lr=3e-4),
            alpha=AutoAlpha(-float(ACT_DIM), 0.0, AdamOptimizerFactory(lr=1e-4)),
            cql_alpha_lr=3e-4, cql_weight=1.0, tau=0.005, gamma=0.99, temperature=1.0,
            with_lagrange=True, lagrange_threshold=10.0, num_repeat_actions=SAMPLES["cql"],
        )  # fmt: skip
    elif algo == "td3bc":  # d4rl_td3_bc.py
        actor = ContinuousActorDeterministic(
            preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
            action_shape=act_shape, max_action=1.0,
        )  # fmt: skip
        algorithm = TD3BC(
            policy=ContinuousDeterministicPolicy(
                actor=actor, exploration_noise=GaussianNoise(sigma=0.1), action_space=act_space
            ),
            policy_optim=AdamOptimizerFactory(lr=3e-4),
            critic=critic(),
            critic_optim=AdamOptimizerFactory(lr=3e-4),
            critic2=critic(),
            critic2_optim=AdamOptimizerFactory(lr=3e-4),
            tau=0.005, gamma=0.99, policy_noise=0.2, update_actor_freq=2, noise_clip=0.5,
            alpha=2.5,
        )  # fmt: skip
    else:
        raise ValueError(f"Tianshou has no {algo}")
    n = len(data["obs"])
    done = data["terminated"] | data["truncated"]
    buf = ReplayBuffer.from_data(
        data["obs"], data["act"], data["rew"], data["terminated"], data["truncated"], done,
        data["obs_next"],
    )  # fmt: skip
    assert len(buf) == n
    buf = algorithm.process_buffer(buf)
    algorithm.train()

    def step() -> None:
        with policy_within_training_step(algorithm.policy):
            algorithm.update(buf, batch)

    step.learner = algorithm  # type: ignore[attr-defined]  # offline_d4rl.py acts with it
    return step, tianshou.__version__


# -- d3rlpy --------------------------------------------------------------------------------------
def _d3rlpy(algo: str, equal: bool, data: dict[str, Any], batch: int) -> Any:
    import d3rlpy
    from d3rlpy.models.encoders import VectorEncoderFactory

    cls = {
        "bc": d3rlpy.algos.BCConfig,
        "bcq": d3rlpy.algos.BCQConfig,
        "cql": d3rlpy.algos.CQLConfig,
        "iql": d3rlpy.algos.IQLConfig,
        "crr": d3rlpy.algos.CRRConfig,
        "td3bc": d3rlpy.algos.TD3PlusBCConfig,
    }[algo]
    kwargs: dict[str, Any] = {"batch_size": batch}
    if equal:  # d3rlpy's encoders are 256-256 already; the counts of sampled actions differ
        enc = VectorEncoderFactory(hidden_units=HIDDEN)
        names = [f for f in cls.__dataclass_fields__ if f.endswith("encoder_factory")]
        kwargs.update({name: enc for name in names})
        if algo in SAMPLES:
            kwargs["n_action_samples"] = SAMPLES[algo]
    config = cls(**kwargs)
    learner = config.create(device="cpu:0")
    learner.create_impl((OBS_DIM,), ACT_DIM)
    dataset = d3rlpy.dataset.MDPDataset(
        observations=data["obs"],
        actions=data["act"],
        rewards=data["rew"].reshape(-1, 1),
        terminals=data["terminated"].astype("float32"),
        timeouts=data["truncated"].astype("float32"),
    )

    def step() -> None:
        learner.update(dataset.sample_transition_batch(batch))

    return step, d3rlpy.__version__


BUILDERS = {"rlblocks": _rlblocks, "tianshou": _tianshou, "d3rlpy": _d3rlpy}


def worker(spec: str, args: argparse.Namespace) -> None:
    """One contender (in its own process): build, warm up, then time a round per ``run`` line
    read from stdin, answering each with one JSON line."""
    import warnings

    import numpy as np
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    fw, algo, sizes = spec.split(":")
    equal = sizes == "equal"
    batch = EQUAL_BATCH if equal else DEFAULT_BATCH[fw][algo]
    step, version = BUILDERS[fw](algo, equal, _data(args.dataset_size), batch)
    t0 = time.perf_counter()
    for i in range(args.warmup):  # a slow learner stops early: the time bounds the warm-up
        step()
        if i >= 2 and time.perf_counter() - t0 > args.seconds:
            break
    print(MARK + json.dumps({"ready": True, "version": version, "batch": batch}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        steps, t0 = 0, time.perf_counter()
        while True:
            step()
            steps += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= args.seconds:
                break
        print(MARK + json.dumps({"rate": steps / elapsed}), flush=True)


def _start(spec: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--worker", spec, "--warmup", str(args.warmup),
           "--seconds", str(args.seconds), "--dataset-size", str(args.dataset_size)]  # fmt: skip
    # stderr to a file: a pipe nobody reads fills up and stalls a chatty library
    err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
    )
    proc.err_file = err  # type: ignore[attr-defined]
    return proc


def _read(proc: subprocess.Popen[str]) -> dict[str, Any] | None:
    """The worker's next answer (lines the libraries print themselves are skipped); None when
    it ended."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return None


def _stderr(proc: subprocess.Popen[str]) -> str:
    err = proc.err_file  # type: ignore[attr-defined]
    err.seek(0)
    return err.read()[-2000:]


def _rounds(
    specs: list[str], procs: dict[str, subprocess.Popen[str]], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Wait for every worker to be ready, then time ``args.repeats`` rotating rounds."""
    results: dict[str, dict[str, Any]] = {}
    for spec, proc in procs.items():  # they build and warm up one after another
        ready = _read(proc)
        if ready is None:
            proc.wait()
            err = _stderr(proc)
            print(f"{spec}: failed\n{err}", flush=True)
            results[spec] = {"error": err}
        else:
            results[spec] = {"rates": [], **ready}
    live = [s for s in specs if "error" not in results[s]]
    for r in range(args.repeats):
        order = live[r % len(live) :] + live[: r % len(live)] if live else []
        for spec in order:
            proc = procs[spec]
            assert proc.stdin is not None
            proc.stdin.write("run\n")
            proc.stdin.flush()
            out = _read(proc)
            if out is None:
                results[spec]["error"] = _stderr(proc)
                print(f"{spec}: died\n{results[spec]['error']}", flush=True)
                continue
            results[spec]["rates"].append(out["rate"])
    for proc in procs.values():
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    return results


def run_algo(algo: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every contender of ``algo`` (frameworks x size settings), interleaved rounds."""
    specs = [f"{fw}:{algo}:{s}" for s in args.sizes for fw in args.frameworks if algo in HAS[fw]]
    procs = {spec: _start(spec, args) for spec in specs}
    try:
        results = _rounds(specs, procs, args)
    finally:  # whatever happened, no worker outlives the run
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for res in results.values():
        if res.get("rates"):
            res["median"] = statistics.median(res["rates"])
    return results


def _fmt(rate: float) -> str:
    """Three significant figures or more: 1234, 123, 12.3, 1.23."""
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"


def table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown table: one row per algorithm and size setting."""
    rows = [
        "| algorithm | sizes | rlblocks | Tianshou | d3rlpy | rlblocks / faster peer |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]

    def cell(spec: str) -> str:
        res = results.get(spec)
        if res is None:
            return "-"
        if "median" not in res:
            return "failed"
        lo, hi = min(res["rates"]), max(res["rates"])
        return f"{_fmt(res['median'])} ({_fmt(lo)}-{_fmt(hi)}; b{res['batch']})"

    for algo in args.algos:
        for sizes in args.sizes:
            own = results.get(f"rlblocks:{algo}:{sizes}", {}).get("median")
            peers = [
                results.get(f"{fw}:{algo}:{sizes}", {}).get("median")
                for fw in ("tianshou", "d3rlpy")
            ]
            best = max((p for p in peers if p), default=None)
            ratio = f"{own / best:.2f}x" if own and best else "-"
            if own and best and sizes == "equal":
                ratio += " (met)" if own >= 2 * best else " (missed)"
            cells = [cell(f"{fw}:{algo}:{sizes}") for fw in FRAMEWORKS]
            rows.append(f"| {algo} | {sizes} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per contender")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round")
    parser.add_argument(
        "--warmup",
        type=int,
        default=50,
        help="untimed steps first (at most --seconds of them, at least 3)",
    )
    parser.add_argument("--dataset-size", type=int, default=20_000)
    parser.add_argument("--json", default="", help="also write the results here")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args)
        return 0
    for name, known in (("algos", ALGOS), ("frameworks", FRAMEWORKS), ("sizes", SIZES)):
        chosen = [x for x in getattr(args, name).split(",") if x]
        unknown = sorted(set(chosen) - set(known))
        if unknown:
            parser.error(f"unknown {name} {unknown}; choose from {list(known)}")
        setattr(args, name, chosen)

    results: dict[str, dict[str, Any]] = {}
    started = time.time()
    for algo in args.algos:
        res = run_algo(algo, args)
        results.update(res)
        for spec, r in res.items():
            if "median" in r:
                print(
                    f"{spec:24s} {r['median']:8.1f} steps/s (rounds {min(r['rates']):.1f}-"
                    f"{max(r['rates']):.1f}; batch {r['batch']}; {r['version']})",
                    flush=True,
                )
    print(
        f"\nGradient steps/s on one CPU thread, Pendulum-v1 shapes, median of {args.repeats} "
        f"rounds of {args.seconds:g} s per contender (range in brackets; b = batch size); "
        f"{time.time() - started:.0f} s in all\n"
    )
    print(table(results, args))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
