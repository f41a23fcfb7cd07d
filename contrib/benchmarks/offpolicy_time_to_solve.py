#!/usr/bin/env python
"""Off-policy time-to-solve on Pendulum-v1: SAC, TD3 and DDPG in rlblocks, Tianshou and SB3.

For each algorithm, seed and framework this measures the wall seconds from the start of training
until the mean return over 100 test episodes reaches -250 on Pendulum-v1, tests included, with a
cap (default 180 s). The printed markdown table has the seconds per seed, the median over seeds
(an unsolved run counts as slower than any solved one), how many seeds solved, the median env
steps, and per algorithm the ratio faster peer's median / rlblocks' median (above 1: rlblocks is
faster).

Every (framework, algorithm, seed) trial runs in a fresh subprocess of this interpreter, so no
framework inherits another's torch threads, RNG state or warm caches, and prints one JSON line
that the parent reads. Trials are interleaved: for each seed, every algorithm, and for each
algorithm every framework, so machine noise falls on all contenders alike. Seeds start at 100
(``--first-seed``), away from the seeds 0-9 that settings are tuned on. Every trial calls
``torch.set_num_threads(--torch-threads)`` (default 1, as in the other time-to-solve scripts).

Contenders (hyperparameters copied from the named sources, not tuned here):

* rlblocks: ``rlblocks.train(algo, env="Pendulum-v1", seed=s, stop_reward=-250, loggers=[],
  progress=False, run_dir=<tmp>)`` with the algorithm's defaults; ``--rlblocks-set KEY=VALUE``
  (repeatable) passes ``overrides`` to try other settings. Time: ``result.wall_seconds``. A
  ``rlblocks_should_stop`` hook ends the run once its wall seconds pass the cap.
* Stable-Baselines3 with the RL Baselines3 Zoo hyperparameters for Pendulum-v1 (``SB3_ZOO``
  below), one training env as in the zoo, and an ``EvalCallback`` of 100 deterministic episodes
  (on 10 eval envs) every ``--sb3-eval-freq`` env steps (default 1,000), stopping at -250 through
  ``StopTrainingOnRewardThreshold``. The zoo's budget (2e4 steps) is lifted so that the cap bounds
  the run; nothing in these settings depends on the budget (constant learning rates, no
  schedules). Time: around ``model.learn``.
* Tianshou with the settings of its own test suite for Pendulum (``TIANSHOU_TESTS`` below). The
  suite already tests on 100 episodes (100 test envs) and stops at -250 for Pendulum-v1 (its
  ``stop_fn`` with the tests' default reward threshold), with ``test_in_training`` on; both are
  kept. What differs from the suite: its epoch limit (10 epochs for SAC, 5 for TD3 and DDPG) is
  lifted so the cap bounds the run, and there is no logger and no ``save_best_fn``. The suite
  has no warm-up collect for these three (the line is commented out there), so none here. Time:
  from just before ``run_training`` (which resets the collectors and runs Tianshou's initial
  test) to its return. Tianshou 2.0.1's trainer scans its whole replay buffer for NaNs after
  every collect (``buffer.hasnull()``, a known regression: thu-ml/tianshou#1265); the table
  times Tianshou as released, with it; ``--tianshou-nan-check off`` times it without (on seeds
  100-102 here, SAC's solves took about 8% less time without the scan).

Run (in .venv-bench for the SB3 and Tianshou columns):
``python contrib/benchmarks/offpolicy_time_to_solve.py [--algos sac,td3,ddpg] [--seeds 5]
[--cap 180] [--frameworks rlblocks,tianshou,sb3] [--rlblocks-set trainer.batch_size=256]
[--out table.md]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from _trials import finite, gist, median_cell, median_seconds, run_json_trial

#: what a trial that did not run to its end counts as
UNSOLVED = {"solved": False, "seconds": None}


ENV_ID = "Pendulum-v1"
THRESHOLD = -250.0  # the stop threshold of Tianshou's tests for Pendulum (gymnasium sets none)
TEST_EPISODES = 100
ALGOS = ("sac", "td3", "ddpg")
FRAMEWORKS = ("rlblocks", "tianshou", "sb3")
LABELS = {"rlblocks": "rlblocks", "tianshou": "Tianshou (tests)", "sb3": "SB3 (zoo)"}

# RL Baselines3 Zoo hyperparameters for Pendulum-v1, read from rl_zoo3/hyperparams/{sac,td3,
# ddpg}.yml in the rl_zoo3 2.9.2 wheel on PyPI. The ymls name no n_envs, so the zoo trains on
# one env; every parameter not listed keeps Stable-Baselines3 2.9.2's default.
#   sac.yml:  n_timesteps: 20000, policy: 'MlpPolicy', learning_rate: 1e-3
#             (SB3 SAC defaults for the rest: buffer_size 1e6, learning_starts 100,
#             batch_size 256, tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1,
#             ent_coef 'auto', target_entropy 'auto', net_arch [256, 256])
#   td3.yml:  n_timesteps: 20000, policy: 'MlpPolicy', gamma: 0.98, buffer_size: 200000,
#             learning_starts: 10000, noise_type: 'normal', noise_std: 0.1, gradient_steps: 1,
#             train_freq: 1, learning_rate: 1e-3, policy_kwargs: "dict(net_arch=[400, 300])"
#             (SB3 TD3 defaults for the rest: batch_size 256, tau 0.005, policy_delay 2,
#             target_policy_noise 0.2, target_noise_clip 0.5)
#   ddpg.yml: the same keys and values as td3.yml (SB3 DDPG defaults: batch_size 256,
#             tau 0.005)
# The zoo turns noise_type 'normal' / noise_std into NormalActionNoise(mean=0, sigma=noise_std)
# per action dimension; so does ``trial_sb3``.
SB3_ZOO_N_TIMESTEPS = 20_000
_SB3_ZOO_TD3_DDPG: dict[str, Any] = {
    "gamma": 0.98,
    "buffer_size": 200_000,
    "learning_starts": 10_000,
    "gradient_steps": 1,
    "train_freq": 1,
    "learning_rate": 1e-3,
    "policy_kwargs": {"net_arch": [400, 300]},
}
SB3_ZOO: dict[str, dict[str, Any]] = {
    "sac": {"kwargs": {"learning_rate": 1e-3}, "noise_std": None},
    "td3": {"kwargs": dict(_SB3_ZOO_TD3_DDPG), "noise_std": 0.1},
    "ddpg": {"kwargs": dict(_SB3_ZOO_TD3_DDPG), "noise_std": 0.1},
}
SB3_TOTAL_TIMESTEPS = 10_000_000  # lifted budget: the cap or the threshold ends the run
SB3_EVAL_FREQ = 1_000  # env steps between SB3's 100-episode evaluations
SB3_EVAL_ENVS = 10

# Tianshou's test suite (thu-ml/tianshou at tag v2.0.1, get_args defaults; the files are the same
# on master as of 2026-04): test/continuous/test_sac_with_il.py (its SAC part, before the
# imitation step), test/continuous/test_td3.py and test/continuous/test_ddpg.py. All three use
# task Pendulum-v1, reward threshold -250, Net hidden sizes [128, 128] for actor and critics
# (critics: Net over concatenated obs and action), 100 test envs and 100 test episodes per test,
# test_in_training, DummyVectorEnv, np.random.seed / torch.manual_seed / envs.seed(seed).
#   SAC:  ContinuousActorProbabilistic(unbounded=True), two critics, buffer 20000, actor_lr 1e-3,
#         critic_lr 1e-3, gamma 0.99, tau 0.005, auto_alpha (target entropy -dim(A),
#         log_alpha 0, alpha_lr 3e-4), n_step 3, epoch 10 x 24000 steps, 10 steps per collect,
#         update_per_step 0.1, batch 128, 10 training envs; test envs seeded seed + 10.
#   TD3:  ContinuousActorDeterministic(max_action), two critics, buffer 20000, actor_lr 1e-4,
#         critic_lr 1e-3, gamma 0.99, tau 0.005, GaussianNoise(sigma=0.1) exploration,
#         policy_noise 0.2, noise_clip 0.5, update_actor_freq 2, n_step 3, epoch 5 x 20000 steps,
#         8 steps per collect, update_per_step 0.125, batch 128, 8 training envs.
#   DDPG: ContinuousActorDeterministic(max_action), one critic, buffer 20000, actor_lr 1e-4,
#         critic_lr 1e-3, gamma 0.99, tau 0.005, GaussianNoise(sigma=0.1), n_step 3,
#         epoch 5 x 20000 steps, 8 steps per collect, update_per_step 0.125, batch 128,
#         8 training envs.
TIANSHOU_TESTS: dict[str, dict[str, Any]] = {
    "sac": {
        "buffer_size": 20_000, "actor_lr": 1e-3, "critic_lr": 1e-3, "gamma": 0.99,
        "tau": 0.005, "alpha_lr": 3e-4, "n_step": 3, "suite_epochs": 10,
        "epoch_num_steps": 24_000, "step_per_collect": 10, "update_per_step": 0.1,
        "batch_size": 128, "hidden_sizes": [128, 128], "training_envs": 10,
        "test_seed_offset": 10,
    },
    "td3": {
        "buffer_size": 20_000, "actor_lr": 1e-4, "critic_lr": 1e-3, "gamma": 0.99,
        "tau": 0.005, "exploration_noise": 0.1, "policy_noise": 0.2, "noise_clip": 0.5,
        "update_actor_freq": 2, "n_step": 3, "suite_epochs": 5, "epoch_num_steps": 20_000,
        "step_per_collect": 8, "update_per_step": 0.125, "batch_size": 128,
        "hidden_sizes": [128, 128], "training_envs": 8, "test_seed_offset": 0,
    },
    "ddpg": {
        "buffer_size": 20_000, "actor_lr": 1e-4, "critic_lr": 1e-3, "gamma": 0.99,
        "tau": 0.005, "exploration_noise": 0.1, "n_step": 3, "suite_epochs": 5,
        "epoch_num_steps": 20_000, "step_per_collect": 8, "update_per_step": 0.125,
        "batch_size": 128, "hidden_sizes": [128, 128], "training_envs": 8,
        "test_seed_offset": 0,
    },
}


class _CapReached(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Trials (each runs in its own subprocess and returns a dict)
# --------------------------------------------------------------------------------------------


def trial_rlblocks(algo: str, seed: int, cap: float, sets: list[str]) -> dict[str, Any]:
    import rlblocks

    hooks: list[object] = []
    try:
        from rlblocks.plugins import hookimpl

        class StopAtCap:
            """Ends the run once the trainer's own clock passes the cap (it has no time limit)."""

            @hookimpl
            def rlblocks_should_stop(self, state: dict[str, Any]) -> bool | None:
                return True if float(state.get("wall_seconds", 0.0)) > cap else None

        hooks.append(StopAtCap())
    except ImportError:  # no hook marker: the parent kills the trial at cap + grace instead
        pass

    with tempfile.TemporaryDirectory(prefix="rlblocks-bench-") as tmp:
        t0 = time.perf_counter()
        result = rlblocks.train(
            algo,
            env=ENV_ID,
            seed=seed,
            stop_reward=THRESHOLD,
            loggers=[],
            progress=False,
            run_dir=os.path.join(tmp, "run"),
            overrides=list(sets),
            hooks=hooks,
        )
        outer = time.perf_counter() - t0
    seconds = float(result.wall_seconds)
    solved = bool(result.solved) and seconds <= cap
    return {
        "solved": solved,
        "seconds": seconds,
        "outer_seconds": outer,  # our own clock around train(), setup included
        "env_steps": int(result.env_steps),
        "best_test_return": finite(result.best_test_return),
        "stop_reason": str(result.stop_reason),
    }


def trial_sb3(algo: str, seed: int, cap: float, eval_freq: int) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3 import DDPG, SAC, TD3
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        CallbackList,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    class TimeCap(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = time.perf_counter()
            self.capped = False

        def _on_step(self) -> bool:
            if time.perf_counter() - self.t0 > cap:
                self.capped = True
                return False
            return True

    zoo = SB3_ZOO[algo]
    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    eval_env = make_vec_env(ENV_ID, n_envs=SB3_EVAL_ENVS, seed=seed + 10_000)
    kwargs = dict(zoo["kwargs"])
    if zoo["noise_std"] is not None:
        n_actions = int(env.action_space.shape[-1])
        kwargs["action_noise"] = NormalActionNoise(
            mean=np.zeros(n_actions), sigma=zoo["noise_std"] * np.ones(n_actions)
        )
    cls = {"sac": SAC, "td3": TD3, "ddpg": DDPG}[algo]
    model = cls("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **kwargs)
    eval_cb = EvalCallback(
        eval_env,
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD, verbose=0),
        n_eval_episodes=TEST_EPISODES,
        eval_freq=eval_freq,  # one training env: callback calls == env steps
        deterministic=True,
        verbose=0,
    )
    cap_cb = TimeCap()
    t0 = cap_cb.t0 = time.perf_counter()
    model.learn(total_timesteps=SB3_TOTAL_TIMESTEPS, callback=CallbackList([eval_cb, cap_cb]))
    seconds = time.perf_counter() - t0
    best = float(eval_cb.best_mean_reward)
    return {
        "solved": best >= THRESHOLD and seconds <= cap,
        "seconds": seconds,
        "env_steps": int(model.num_timesteps),
        "best_test_return": finite(best),
        "n_evals": eval_cb.n_calls // eval_freq,  # evaluations_timesteps needs a log_path
        "stop_reason": "cap" if cap_cb.capped else ("solved" if best >= THRESHOLD else "budget"),
    }


def trial_tianshou(algo: str, seed: int, cap: float, nan_check: str = "on") -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import DDPG, SAC, TD3
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.exploration import GaussianNoise
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import (
        ContinuousActorDeterministic,
        ContinuousActorProbabilistic,
        ContinuousCritic,
    )

    a = TIANSHOU_TESTS[algo]
    test_means: list[float] = []

    class RecordingCollector(Collector):
        """The test collector, recording each test's mean return (for capped runs)."""

        def collect(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().collect(*args, **kwargs)
            if stats.returns_stat is not None:
                test_means.append(float(stats.returns_stat.mean))
            return stats

    env = gym.make(ENV_ID)
    train_envs = DummyVectorEnv([lambda: gym.make(ENV_ID) for _ in range(a["training_envs"])])
    test_envs = DummyVectorEnv([lambda: gym.make(ENV_ID) for _ in range(TEST_EPISODES)])
    np.random.seed(seed)
    torch.manual_seed(seed)
    train_envs.seed(seed)
    test_envs.seed(seed + a["test_seed_offset"])
    obs_shape = env.observation_space.shape
    act_shape = env.action_space.shape
    max_action = float(np.max(env.action_space.high))

    def critic() -> ContinuousCritic:
        body = Net(
            state_shape=obs_shape, action_shape=act_shape, hidden_sizes=a["hidden_sizes"],
            concat=True,
        )
        return ContinuousCritic(preprocess_net=body)

    actor_body = Net(state_shape=obs_shape, hidden_sizes=a["hidden_sizes"])
    algorithm: Any
    if algo == "sac":
        policy: Any = SACPolicy(
            actor=ContinuousActorProbabilistic(
                preprocess_net=actor_body, action_shape=act_shape, unbounded=True
            ),
            action_space=env.action_space,
        )
        alpha = AutoAlpha(
            target_entropy=-float(np.prod(act_shape)),
            log_alpha=0.0,
            optim=AdamOptimizerFactory(lr=a["alpha_lr"]),
        )
        algorithm = SAC(
            policy=policy, policy_optim=AdamOptimizerFactory(lr=a["actor_lr"]),
            critic=critic(), critic_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
            critic2=critic(), critic2_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
            tau=a["tau"], gamma=a["gamma"], alpha=alpha, n_step_return_horizon=a["n_step"],
        )
    else:
        policy = ContinuousDeterministicPolicy(
            actor=ContinuousActorDeterministic(
                preprocess_net=actor_body, action_shape=act_shape, max_action=max_action
            ),
            action_space=env.action_space,
            exploration_noise=GaussianNoise(sigma=a["exploration_noise"]),
        )
        common = {
            "policy": policy, "policy_optim": AdamOptimizerFactory(lr=a["actor_lr"]),
            "critic": critic(), "critic_optim": AdamOptimizerFactory(lr=a["critic_lr"]),
            "tau": a["tau"], "gamma": a["gamma"], "n_step_return_horizon": a["n_step"],
        }
        if algo == "td3":
            algorithm = TD3(
                **common, critic2=critic(), critic2_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
                policy_noise=a["policy_noise"], update_actor_freq=a["update_actor_freq"],
                noise_clip=a["noise_clip"],
            )
        else:
            algorithm = DDPG(**common)
    buf = VectorReplayBuffer(a["buffer_size"], buffer_num=len(train_envs))
    if nan_check == "off":  # the trainer's whole-buffer NaN scan after every collect
        buf.hasnull = lambda: False  # type: ignore[method-assign]
    train_collector = Collector[CollectStats](algorithm, train_envs, buf, exploration_noise=True)
    test_collector = RecordingCollector(algorithm, test_envs)

    t0 = time.perf_counter()

    def training_fn(epoch: int, env_step: int) -> None:
        if time.perf_counter() - t0 > cap:
            raise _CapReached

    capped = False
    try:
        algorithm.run_training(
            OffPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=test_collector,
                max_epochs=1_000_000,  # lifted from the suite's a["suite_epochs"]: the cap bounds
                epoch_num_steps=a["epoch_num_steps"],
                collection_step_num_env_steps=a["step_per_collect"],
                test_step_num_episodes=TEST_EPISODES,
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
        "nan_check": nan_check,
        "solved": best >= THRESHOLD and seconds <= cap and not capped,
        "seconds": seconds,
        "env_steps": int(train_collector.collect_step),
        "best_test_return": finite(best),
        "n_evals": len(test_means),
        "stop_reason": "cap" if capped else ("solved" if best >= THRESHOLD else "budget"),
    }


# --------------------------------------------------------------------------------------------
# Parent: schedule trials, print the table
# --------------------------------------------------------------------------------------------


def run_trial_subprocess(fw: str, algo: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, os.path.abspath(__file__), "--_trial", fw, "--_algo", algo,
        "--_seed", str(seed), "--cap", str(args.cap), "--torch-threads", str(args.torch_threads),
        "--sb3-eval-freq", str(args.sb3_eval_freq),
        "--tianshou-nan-check", args.tianshou_nan_check,
    ]
    for kv in args.rlblocks_set:
        cmd += ["--rlblocks-set", kv]
    base = {"framework": fw, "algo": algo, "seed": seed}
    return run_json_trial(cmd, base, timeout=args.cap + args.grace, failed=UNSOLVED)


def _cell(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "error"
    s = r.get("seconds")
    if s is None:
        return "-"
    return f"{s:.1f}" if r.get("solved") else f"({s:.0f})"


def _ratio(ours: float | None, peer: float | None, cap: float) -> str:
    """faster peer's median / rlblocks' median, with bounds where one side did not solve."""
    if ours is None or peer is None:
        return "-"
    if math.isinf(ours) and math.isinf(peer):
        return "both unsolved"
    if math.isinf(peer):
        return f">{cap / ours:.2f}"
    if math.isinf(ours):
        return f"<{peer / cap:.2f}"
    return f"{peer / ours:.2f}"


def build_table(
    results: dict[str, dict[str, list[dict[str, Any]]]],
    algos: list[str],
    frameworks: list[str],
    seeds: list[int],
    cap: float,
) -> str:
    head = ["algo", "framework", *[f"seed {s}" for s in seeds], "median s", "solved",
            "median env steps", "faster peer / rlblocks"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for algo in algos:
        med = {fw: median_seconds(results[algo][fw]) for fw in frameworks}
        peers = [fw for fw in frameworks if fw != "rlblocks" and med[fw] is not None]
        best_peer = min(peers, key=lambda fw: med[fw]) if peers else None  # type: ignore[arg-type]
        for fw in frameworks:
            rs = results[algo][fw]
            steps = [r["env_steps"] for r in rs if r.get("env_steps") is not None]
            ratio = ""
            if fw == "rlblocks" and best_peer is not None and med["rlblocks"] is not None:
                ratio = f"{_ratio(med['rlblocks'], med[best_peer], cap)} ({LABELS[best_peer]})"
            row = [
                algo.upper(), LABELS[fw], *[_cell(r) for r in rs], median_cell(med[fw], cap),
                f"{sum(bool(r.get('solved')) for r in rs)}/{len(rs)}",
                f"{statistics.median(steps):,.0f}" if steps else "-", ratio,
            ]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default=",".join(ALGOS), help="subset of " + ",".join(ALGOS))
    parser.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="subset of " + ",".join(FRAMEWORKS)
    )
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds")
    parser.add_argument("--first-seed", type=int, default=100, help="seeds run from here up")
    parser.add_argument("--cap", type=float, default=180.0, help="seconds allowed per trial")
    parser.add_argument(
        "--grace", type=float, default=120.0,
        help="extra seconds before a trial subprocess is killed (imports, setup, a last test)",
    )
    parser.add_argument(
        "--rlblocks-set", action="append", default=[], metavar="KEY=VALUE",
        help="an override for rlblocks.train (e.g. trainer.batch_size=256); repeatable",
    )
    parser.add_argument(
        "--sb3-eval-freq", type=int, default=SB3_EVAL_FREQ,
        help="env steps between SB3's 100-episode evaluations",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=1,
        help="torch.set_num_threads in every trial (0: leave torch's default); the same for all",
    )
    parser.add_argument("--out", metavar="PATH", help="also write the markdown table here")
    parser.add_argument("--json", metavar="PATH", help="also write all trial results here")
    parser.add_argument(
        "--tianshou-nan-check",
        choices=("on", "off"),
        default="on",
        help="Tianshou 2.0.1's scan of its whole replay buffer for NaNs after every collect: on "
        "as released (it costs time that grows with the buffer; thu-ml/tianshou#1265), off to "
        "time Tianshou without it",
    )
    parser.add_argument("--_trial", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--_algo", choices=ALGOS, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._trial:  # child process: one trial, one JSON line on stdout
        if args.torch_threads > 0:
            import torch

            torch.set_num_threads(args.torch_threads)
        if args._trial == "rlblocks":
            out = trial_rlblocks(args._algo, args._seed, args.cap, args.rlblocks_set)
        elif args._trial == "sb3":
            out = trial_sb3(args._algo, args._seed, args.cap, args.sb3_eval_freq)
        else:
            out = trial_tianshou(args._algo, args._seed, args.cap, args.tianshou_nan_check)
        print(json.dumps(out), flush=True)
        return 0

    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for a in algos:
        if a not in ALGOS:
            parser.error(f"unknown algorithm {a!r}")
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results = {a: {fw: [] for fw in frameworks} for a in algos}
    print(
        f"Off-policy time to solve {ENV_ID} (mean of {TEST_EPISODES} test episodes >= "
        f"{THRESHOLD:.0f}), cap {args.cap:.0f} s, seeds {seeds}, torch threads "
        f"{args.torch_threads or 'default'}, SB3 eval every {args.sb3_eval_freq} env steps"
        + (f", rlblocks overrides {args.rlblocks_set}" if args.rlblocks_set else ""),
        flush=True,
    )
    for seed in seeds:
        for algo in algos:
            for fw in frameworks:
                r = run_trial_subprocess(fw, algo, seed, args)
                results[algo][fw].append(r)
                if r.get("error"):
                    extra = f"error: {r['error']}"
                else:
                    extra = (
                        f"{r['seconds']:7.1f} s solved={r['solved']} env_steps={r['env_steps']} "
                        f"best={r.get('best_test_return')} stop={r.get('stop_reason')}"
                    )
                print(f"  seed {seed} {algo:<4} {LABELS[fw]:<16} {extra}", flush=True)

    table = build_table(results, algos, frameworks, seeds, args.cap)
    notes = (
        f"Seconds to a mean of {TEST_EPISODES} test episodes >= {THRESHOLD:.0f} on {ENV_ID}; "
        f"(x): not solved within the {args.cap:.0f} s cap, x seconds run; medians count an "
        "unsolved run as slower than any solved one. Ratio above 1: rlblocks is faster."
    )
    print("\n" + table + "\n\n" + notes)
    errors = [r for a in algos for fw in frameworks for r in results[a][fw] if r.get("error")]
    for r in errors:
        print(f"error: {r['algo']} {LABELS[r['framework']]} seed {r['seed']}: {gist(r['error'])}")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n\n" + notes + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cap": args.cap, "seeds": seeds, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
