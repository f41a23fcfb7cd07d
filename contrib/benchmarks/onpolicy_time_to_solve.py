#!/usr/bin/env python
"""On-policy time-to-solve: PPO and A2C on CartPole-v1 (mean of 100 test episodes >= 475) and PPO
on Pendulum-v1 (>= -250), rlblocks against Stable-Baselines3, one fresh subprocess per trial.

Seconds from the start of training to the threshold, evaluations included, median over seeds
(an unsolved run counts as slower than any solved one). Each trial prints one JSON line.

* rlblocks: ``rlblocks.train(algo, env=..., seed=s, stop_reward=threshold)`` with the algorithm's
  defaults (CartPole) or the overrides in ``RLBLOCKS_OVERRIDES`` (Pendulum, the same settings as
  the PPO training test). Time: ``result.wall_seconds``.
* Stable-Baselines3 with the RL Baselines3 Zoo hyperparameters (``SB3_ZOO`` below) and an
  ``EvalCallback`` of 100 deterministic episodes every ``SB3_EVAL_FREQ`` env steps that stops at
  the threshold. Time: around ``model.learn``.

Tianshou's numbers (measured before this work, same protocol): PPO CartPole 22.0 s, A2C CartPole
39.6 s, PPO Pendulum 14.0 s; pass ``--reference`` to print them next to the table.

Run: ``python contrib/benchmarks/onpolicy_time_to_solve.py [--tasks ppo-cartpole,a2c-cartpole,
ppo-pendulum] [--seeds 5] [--cap 120]`` (in /work/benchvenv for the SB3 column).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

TASKS: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {"algo": "ppo", "env": "CartPole-v1", "threshold": 475.0},
    "a2c-cartpole": {"algo": "a2c", "env": "CartPole-v1", "threshold": 475.0},
    "ppo-pendulum": {"algo": "ppo", "env": "Pendulum-v1", "threshold": -250.0},
}
TIANSHOU_REFERENCE = {"ppo-cartpole": 22.0, "a2c-cartpole": 39.6, "ppo-pendulum": 14.0}
RLBLOCKS_OVERRIDES = {
    "ppo-pendulum": [
        "algo.gamma=0.9",
        "algo.lr=1e-3",
        "trainer.step_per_collect=2048",
        "buffer.size=4200",
        "trainer.test_interval=8000",
    ],
}
# RL Baselines3 Zoo (rl_zoo3 2.x hyperparams/ppo.yml and a2c.yml) for these envs.
SB3_ZOO: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {
        "n_envs": 8,
        "kwargs": {
            "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
            "ent_coef": 0.0, "learning_rate": 1e-3, "clip_range": 0.2,
        },
    },
    "a2c-cartpole": {"n_envs": 8, "kwargs": {"ent_coef": 0.0}},
    "ppo-pendulum": {
        "n_envs": 4,
        "kwargs": {
            "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10, "ent_coef": 0.0,
            "learning_rate": 1e-3, "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4,
        },
    },
}
SB3_EVAL_FREQ = 5_000  # env steps between evaluations (divided among the training envs)
TEST_EPISODES = 100


def trial_rlblocks(task: str, seed: int, cap: float) -> dict[str, Any]:
    import tempfile

    import rlblocks

    t = TASKS[task]
    with tempfile.TemporaryDirectory() as tmp:
        result = rlblocks.train(
            t["algo"], env=t["env"], seed=seed, stop_reward=t["threshold"], loggers=[],
            progress=False, run_dir=f"{tmp}/run", overrides=RLBLOCKS_OVERRIDES.get(task, []),
            max_env_steps=2_000_000,
        )
    seconds = result.wall_seconds
    return {"solved": bool(result.solved) and seconds <= cap, "seconds": seconds,
            "env_steps": result.env_steps, "best": result.best_test_return}


def trial_sb3(task: str, seed: int, cap: float) -> dict[str, Any]:
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env

    t = TASKS[task]
    zoo = SB3_ZOO[task]
    env = make_vec_env(t["env"], n_envs=zoo["n_envs"], seed=seed)
    eval_env = make_vec_env(t["env"], n_envs=10, seed=seed + 10_000)
    cls = PPO if t["algo"] == "ppo" else A2C
    model = cls("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **zoo["kwargs"])

    class Cap(BaseCallback):
        def _on_step(self) -> bool:
            return time.perf_counter() - start < cap

    stop = StopTrainingOnRewardThreshold(reward_threshold=t["threshold"], verbose=0)
    evaluate = EvalCallback(
        eval_env, callback_on_new_best=stop, n_eval_episodes=TEST_EPISODES,
        eval_freq=max(SB3_EVAL_FREQ // zoo["n_envs"], 1), deterministic=True, verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=10_000_000, callback=[evaluate, Cap()])
    seconds = time.perf_counter() - start
    best = float(evaluate.best_mean_reward)
    return {"solved": best >= t["threshold"] and seconds <= cap, "seconds": seconds,
            "env_steps": int(model.num_timesteps), "best": best}


TRIALS = {"rlblocks": trial_rlblocks, "sb3": trial_sb3}


def run_trial(fw: str, task: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--_trial", fw, "--_task", task, "--_seed", str(seed),
           "--cap", str(args.cap)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.cap + 120)
    except subprocess.TimeoutExpired:
        return {"solved": False, "seconds": math.inf, "error": "killed after cap + grace"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"solved": False, "seconds": math.inf, "error": proc.stderr.strip()[-300:]}
    return json.loads(lines[-1])


def median_seconds(results: list[dict[str, Any]]) -> float:
    return statistics.median(r["seconds"] if r.get("solved") else math.inf for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--frameworks", default="rlblocks,sb3")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cap", type=float, default=120.0, help="seconds allowed per trial")
    parser.add_argument("--reference", action="store_true", help="print Tianshou's reference")
    parser.add_argument("--_trial")
    parser.add_argument("--_task")
    parser.add_argument("--_seed", type=int)
    args = parser.parse_args(argv)
    if args._trial:
        import torch

        torch.set_num_threads(1)
        print(json.dumps(TRIALS[args._trial](args._task, args._seed, args.cap)), flush=True)
        return 0
    tasks = [t for t in args.tasks.split(",") if t]
    frameworks = [f for f in args.frameworks.split(",") if f]
    for task in tasks:
        results: dict[str, list[dict[str, Any]]] = {fw: [] for fw in frameworks}
        for seed in range(args.seeds):
            for fw in frameworks:
                r = run_trial(fw, task, seed, args)
                results[fw].append(r)
                print(f"  {task} seed {seed} {fw:<9} {r.get('seconds', math.inf):7.1f} s "
                      f"solved={r.get('solved')} steps={r.get('env_steps')} "
                      f"{r.get('error', '')}", flush=True)
        med = {fw: median_seconds(results[fw]) for fw in frameworks}
        line = "  ".join(f"{fw} {med[fw]:.1f} s" for fw in frameworks)
        if args.reference:
            line += f"  tianshou (reference) {TIANSHOU_REFERENCE[task]:.1f} s"
        print(f"{task}: median {line}")
        peers = [fw for fw in frameworks if fw != "rlblocks" and math.isfinite(med[fw])]
        if "rlblocks" in med and peers:
            best = min(peers, key=lambda fw: med[fw])
            print(f"{task}: faster peer / rlblocks = {med[best] / med['rlblocks']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
