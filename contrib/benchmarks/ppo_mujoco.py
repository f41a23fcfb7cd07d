#!/usr/bin/env python
"""PPO on MuJoCo for a chosen budget, with PPO's MuJoCo defaults (its spec's ``env_defaults``: the
PPO paper's hyperparameters plus observation normalisation and value scaling), printing the best
test return per env and seed. The learning rate is annealed to zero over the chosen budget.

Named ``ppo_mujoco.py``, not ``mujoco.py``: a script's folder comes first on ``sys.path``, so a
``mujoco.py`` there would shadow the ``mujoco`` package for every script in it.

Run: ``python contrib/benchmarks/ppo_mujoco.py --envs HalfCheetah-v5,Hopper-v5 --steps 1000000
--seeds 3 --backend shmem``. For reference, Tianshou's published PPO results at 1M steps
(its README's MuJoCo table): HalfCheetah ~5400, Hopper ~3100, Walker2d ~3600, Ant ~3200.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch

import rlblocks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--backend", default="shmem")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for env in args.envs.split(","):
        best = []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                r = rlblocks.train(
                    "ppo", env=env, seed=seed, backend=args.backend,
                    max_env_steps=args.steps, loggers=[], progress=False, run_dir=f"{tmp}/run",
                    overrides=[f"algo.lr_decay_steps={args.steps}"], stop_reward=1e9,
                )
            best.append(r.best_test_return)
            print(f"{env} seed {seed}: best {r.best_test_return:.1f} last "
                  f"{r.last_test_return:.1f} in {r.wall_seconds:.0f} s", flush=True)
        print(f"{env}: median best test return {statistics.median(best):.1f} over {args.seeds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
