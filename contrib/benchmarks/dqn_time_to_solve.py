#!/usr/bin/env python
"""DQN time-to-solve on CartPole-v1: rlblocks against Stable-Baselines3 and Tianshou, in one run.

For each seed and framework this measures the wall seconds from the start of training until the
mean return over 100 test episodes reaches 475 (CartPole-v1's reward threshold), evaluations
included, with a cap (default 300 s). The table shows the seconds per seed, whether the run
solved the task within the cap, the median over seeds (an unsolved run counts as slower than
any solved one), and the ratio of rlblocks' median to the faster peer's.

Every (framework, seed) trial runs in a fresh subprocess of the same interpreter (so no
framework inherits another's torch threads, RNG state or warm caches); trials are interleaved
seed by seed. A trial prints one JSON line that the parent reads.

Contenders (hyperparameters are copied from the named sources, not tuned here):

* rlblocks: ``rlblocks.train("dqn", env="CartPole-v1", seed=s, loggers=[], progress=False)``
  with the algorithm's defaults; its default stop rule is the env's reward threshold over 100
  test episodes, tested every 5,000 env steps. Time: ``result.wall_seconds``.
* Stable-Baselines3 DQN with the RL Baselines3 Zoo hyperparameters for CartPole-v1 (see
  ``SB3_ZOO_CARTPOLE`` below), one training env as in the zoo, and an ``EvalCallback`` running 100
  deterministic test episodes (on 10 eval envs) every 5,000 env steps, stopping at 475 through
  ``StopTrainingOnRewardThreshold``. Time: around ``model.learn``.
* Tianshou DQN with the settings of its own test suite for CartPole (see ``TIANSHOU_TEST_DQN``
  below): test after every 10,000-step epoch and whenever training episodes reach the threshold
  (``test_in_training``), 100 test episodes, stop at 475. Time: from the warm-up collect to the
  return of ``run_training``.

Run: ``python contrib/benchmarks/dqn_time_to_solve.py [--seeds 3] [--cap 300]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

from _trials import finite, median_cell, median_seconds, run_json_trial

#: what a trial that did not run to its end counts as
UNSOLVED = {"solved": False, "seconds": None}


ENV_ID = "CartPole-v1"
THRESHOLD = 475.0  # gymnasium's reward_threshold for CartPole-v1
TEST_EPISODES = 100
FRAMEWORKS = ("rlblocks", "sb3", "tianshou")
LABELS = {"rlblocks": "rlblocks", "sb3": "SB3 (zoo)", "tianshou": "Tianshou"}

# RL Baselines3 Zoo hyperparameters for DQN on CartPole-v1 ("# Almost Tuned"), read from
# rl_zoo3/hyperparams/dqn.yml in the rl_zoo3 2.9.2 wheel on PyPI:
#   n_timesteps: 5e4, policy: MlpPolicy, learning_rate: 2.3e-3, batch_size: 64,
#   buffer_size: 100000, learning_starts: 1000, gamma: 0.99, target_update_interval: 10,
#   train_freq: 256, gradient_steps: 128, exploration_fraction: 0.16,
#   exploration_final_eps: 0.04, policy_kwargs: "dict(net_arch=[256, 256])"
# The zoo trains with n_envs=1 (its default when the yml names none).
SB3_ZOO_CARTPOLE: dict[str, Any] = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}
SB3_ZOO_N_TIMESTEPS = 50_000
# SB3 anneals epsilon over exploration_fraction * total_timesteps. We let training run past the
# zoo's 5e4 steps (until solved or the cap) with a larger total_timesteps, and scale
# exploration_fraction so that epsilon still reaches its final value after 0.16 * 5e4 = 8,000
# steps, exactly as in the zoo. (The learning rate is constant, so nothing else depends on it.)
SB3_TOTAL_TIMESTEPS = 10_000_000
SB3_EVAL_FREQ = 5_000  # env steps between evaluations: the same as rlblocks' default test_interval
SB3_EVAL_ENVS = 10

# Tianshou's test suite, test/discrete/test_dqn.py (get_args defaults, tianshou 2.x; the same DQN
# arguments appear in test/discrete/test_dqn_icm.py): task CartPole-v1, eps_test 0.05,
# eps_train 0.1, buffer_size 20000, lr 1e-3, gamma 0.9, n_step 3, target_update_freq 320,
# epoch 20, epoch_num_steps 10000, collection_step_num_env_steps 10, update_per_step 0.1,
# batch_size 64, hidden_sizes [128, 128, 128, 128], num_training_envs 10, num_test_envs 100,
# test_in_train True, a warm-up collect of batch_size * num_training_envs steps, and this
# eps_train schedule: 0.1 up to 10k env steps, then linear down to 0.01 at 50k, then 0.01.
# The suite stops at a reward threshold of 195 for CartPole-v1; here it is 475, and max_epochs is
# lifted (the cap bounds the run instead of the suite's 20 epochs).
TIANSHOU_TEST_DQN: dict[str, Any] = {
    "eps_test": 0.05,
    "eps_train": 0.1,
    "buffer_size": 20_000,
    "lr": 1e-3,
    "gamma": 0.9,
    "n_step": 3,
    "target_update_freq": 320,
    "epoch_num_steps": 10_000,
    "collection_step_num_env_steps": 10,
    "update_per_step": 0.1,
    "batch_size": 64,
    "hidden_sizes": [128, 128, 128, 128],
    "num_training_envs": 10,
    "num_test_envs": TEST_EPISODES,
}


class _CapReached(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Trials (each runs inside its own subprocess and returns a dict)
# --------------------------------------------------------------------------------------------


def trial_rlblocks(seed: int, cap: float) -> dict[str, Any]:
    import rlblocks

    with tempfile.TemporaryDirectory(prefix="rlblocks-bench-") as tmp:
        t0 = time.perf_counter()
        result = rlblocks.train(
            "dqn",
            env=ENV_ID,
            seed=seed,
            loggers=[],
            progress=False,
            run_dir=os.path.join(tmp, "run"),
        )
        outer = time.perf_counter() - t0
    seconds = float(result.wall_seconds)
    return {
        "solved": bool(result.solved) and seconds <= cap,
        "seconds": seconds,
        "outer_seconds": outer,  # our own clock around train(), setup included
        "env_steps": int(result.env_steps),
        "best_test_return": finite(result.best_test_return),
        "stop_reason": str(result.stop_reason),
    }


def trial_sb3(seed: int, cap: float) -> dict[str, Any]:
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        CallbackList,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env

    class TimeCap(BaseCallback):
        def __init__(self, t0: float) -> None:
            super().__init__()
            self.t0 = t0
            self.capped = False

        def _on_step(self) -> bool:
            if time.perf_counter() - self.t0 > cap:
                self.capped = True
                return False
            return True

    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    eval_env = make_vec_env(ENV_ID, n_envs=SB3_EVAL_ENVS, seed=seed + 10_000)
    hp = dict(SB3_ZOO_CARTPOLE)
    hp["exploration_fraction"] *= SB3_ZOO_N_TIMESTEPS / SB3_TOTAL_TIMESTEPS
    model = DQN("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **hp)
    eval_cb = EvalCallback(
        eval_env,
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD, verbose=0),
        n_eval_episodes=TEST_EPISODES,
        eval_freq=SB3_EVAL_FREQ,
        deterministic=True,
        verbose=0,
    )
    t0 = time.perf_counter()
    cap_cb = TimeCap(t0)
    model.learn(total_timesteps=SB3_TOTAL_TIMESTEPS, callback=CallbackList([eval_cb, cap_cb]))
    seconds = time.perf_counter() - t0
    best = float(eval_cb.best_mean_reward)
    return {
        "solved": best >= THRESHOLD and seconds <= cap,
        "seconds": seconds,
        "env_steps": int(model.num_timesteps),
        "best_test_return": finite(best),
        "n_evals": len(eval_cb.evaluations_timesteps),
        "stop_reason": "cap" if cap_cb.capped else ("solved" if best >= THRESHOLD else "budget"),
    }


def trial_tianshou(seed: int, cap: float) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net

    a = TIANSHOU_TEST_DQN
    test_means: list[float] = []

    class RecordingCollector(Collector):
        """The test collector, recording each test step's mean return (for capped runs)."""

        def collect(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().collect(*args, **kwargs)
            if stats.returns_stat is not None:
                test_means.append(float(stats.returns_stat.mean))
            return stats

    env = gym.make(ENV_ID)
    train_envs = DummyVectorEnv([lambda: gym.make(ENV_ID) for _ in range(a["num_training_envs"])])
    test_envs = DummyVectorEnv([lambda: gym.make(ENV_ID) for _ in range(a["num_test_envs"])])
    np.random.seed(seed)
    torch.manual_seed(seed)
    train_envs.seed(seed)
    test_envs.seed(seed)
    net = Net(
        state_shape=env.observation_space.shape,
        action_shape=int(env.action_space.n),
        hidden_sizes=a["hidden_sizes"],
    )
    policy = DiscreteQLearningPolicy(
        model=net,
        action_space=env.action_space,
        eps_training=a["eps_train"],
        eps_inference=a["eps_test"],
    )
    algorithm = DQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=a["lr"]),
        gamma=a["gamma"],
        n_step_return_horizon=a["n_step"],
        target_update_freq=a["target_update_freq"],
    )
    buf = VectorReplayBuffer(a["buffer_size"], buffer_num=len(train_envs))
    train_collector = Collector[CollectStats](algorithm, train_envs, buf, exploration_noise=True)
    test_collector = RecordingCollector(algorithm, test_envs, exploration_noise=True)

    t0 = time.perf_counter()

    def training_fn(epoch: int, env_step: int) -> None:
        if time.perf_counter() - t0 > cap:
            raise _CapReached
        eps = a["eps_train"]
        if env_step <= 10_000:
            policy.set_eps_training(eps)
        elif env_step <= 50_000:
            policy.set_eps_training(eps - (env_step - 10_000) / 40_000 * (0.9 * eps))
        else:
            policy.set_eps_training(0.1 * eps)

    capped = False
    train_collector.reset()
    train_collector.collect(n_step=a["batch_size"] * a["num_training_envs"])
    try:
        algorithm.run_training(
            OffPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=test_collector,
                max_epochs=1_000_000,
                epoch_num_steps=a["epoch_num_steps"],
                collection_step_num_env_steps=a["collection_step_num_env_steps"],
                test_step_num_episodes=a["num_test_envs"],
                batch_size=a["batch_size"],
                update_step_num_gradient_steps_per_sample=a["update_per_step"],
                training_fn=training_fn,
                stop_fn=lambda mean_rewards: mean_rewards >= THRESHOLD,
                test_in_training=True,
                logger=None,
                verbose=False,
                show_progress=False,
            )
        )
    except _CapReached:
        capped = True
    seconds = time.perf_counter() - t0
    best = max(test_means, default=-math.inf)
    return {
        "solved": best >= THRESHOLD and seconds <= cap and not capped,
        "seconds": seconds,
        "env_steps": int(train_collector.collect_step),
        "best_test_return": finite(best),
        "n_evals": len(test_means),
        "stop_reason": "cap" if capped else ("solved" if best >= THRESHOLD else "budget"),
    }


TRIALS = {"rlblocks": trial_rlblocks, "sb3": trial_sb3, "tianshou": trial_tianshou}


# --------------------------------------------------------------------------------------------
# Parent: schedule trials, print the table
# --------------------------------------------------------------------------------------------


def run_trial_subprocess(fw: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_trial",
        fw,
        "--_seed",
        str(seed),
        "--cap",
        str(args.cap),
        "--torch-threads",
        str(args.torch_threads),
    ]
    base = {"framework": fw, "seed": seed}
    return run_json_trial(cmd, base, timeout=args.cap + args.grace, failed=UNSOLVED)


def _fmt_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r.get("error"):
        return "error"
    s = r.get("seconds")
    if s is None:
        return "-"
    return f"{s:7.1f} {'yes' if r['solved'] else 'NO '}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--cap", type=float, default=300.0, help="seconds allowed per trial")
    parser.add_argument(
        "--grace",
        type=float,
        default=120.0,
        help="extra seconds before a trial subprocess is killed (imports, setup, last eval)",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help="comma-separated subset of " + ",".join(FRAMEWORKS),
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads in every trial (0: leave torch's default); the same for all",
    )
    parser.add_argument("--json", metavar="PATH", help="also write all trial results here")
    parser.add_argument("--_trial", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._trial:  # child process: one trial, one JSON line on stdout
        if args.torch_threads > 0:
            import torch

            torch.set_num_threads(args.torch_threads)
        out = TRIALS[args._trial](args._seed, args.cap)
        print(json.dumps(out), flush=True)
        return 0

    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results: dict[str, list[dict[str, Any]]] = {fw: [] for fw in frameworks}
    print(
        f"DQN time to solve {ENV_ID} (mean of {TEST_EPISODES} test episodes >= {THRESHOLD:.0f}), "
        f"cap {args.cap:.0f} s, seeds {seeds}, torch threads {args.torch_threads or 'default'}",
        flush=True,
    )
    for seed in seeds:
        for fw in frameworks:
            r = run_trial_subprocess(fw, seed, args)
            results[fw].append(r)
            extra = f" env_steps={r.get('env_steps')} best={r.get('best_test_return')}"
            if r.get("error"):
                extra = f" error: {r['error']}"
            print(f"  seed {seed} {LABELS[fw]:<10} {_fmt_cell(r)}{extra}", flush=True)

    width = 18
    print("\nseconds to solve (solved within cap?)")
    print(f"{'seed':<8}" + "".join(f"{LABELS[fw]:>{width}}" for fw in frameworks))
    for i, seed in enumerate(seeds):
        print(f"{seed:<8}" + "".join(f"{_fmt_cell(results[fw][i]):>{width}}" for fw in frameworks))
    med = {fw: median_seconds(results[fw]) for fw in frameworks}
    cells = [median_cell(med[fw], args.cap) for fw in frameworks]
    print(f"{'median':<8}" + "".join(f"{c:>{width}}" for c in cells))
    n_solved = {fw: sum(bool(r.get("solved")) for r in results[fw]) for fw in frameworks}
    cells = [f"{n_solved[fw]}/{len(seeds)}" for fw in frameworks]
    print(f"{'solved':<8}" + "".join(f"{c:>{width}}" for c in cells))

    peers = [fw for fw in frameworks if fw != "rlblocks"]
    finite_peers = [fw for fw in peers if med[fw] is not None and not math.isinf(med[fw])]
    if "rlblocks" in frameworks and peers:
        ours = med["rlblocks"]
        if not finite_peers:
            print("\nratio: no peer solved in the median; nothing to compare against")
        else:
            best = min(finite_peers, key=lambda fw: med[fw])
            if ours is None or math.isinf(ours):
                print(
                    f"\nratio: rlblocks did not solve in the median; faster peer {LABELS[best]} "
                    f"median {med[best]:.1f} s"
                )
            else:
                r = ours / med[best]
                who = "rlblocks" if r < 1 else LABELS[best]
                print(
                    f"\nratio rlblocks / faster peer ({LABELS[best]}), median seconds: {r:.2f} "
                    f"({who} is {max(r, 1 / r):.2f}x faster)"
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cap": args.cap, "seeds": seeds, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
