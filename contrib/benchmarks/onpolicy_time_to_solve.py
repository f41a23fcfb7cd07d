#!/usr/bin/env python
"""On-policy time-to-solve: PPO and A2C on CartPole-v1 (mean of 100 test episodes >= 475) and PPO
on Pendulum-v1 (>= -250), rlblocks against Stable-Baselines3 and Tianshou, one fresh subprocess
per trial.

Seconds from the start of training to the threshold, evaluations included, median over seeds
(an unsolved run counts as slower than any solved one). Each trial prints one JSON line.

* rlblocks: ``rlblocks.train(algo, env=..., seed=s, stop_reward=threshold)`` with the algorithm's
  defaults for that env (PPO's ``env_defaults`` for ``Pendulum-*``, as in the training tests).
  Time: ``result.wall_seconds``.
* Stable-Baselines3 with the RL Baselines3 Zoo hyperparameters (``SB3_ZOO`` below) and an
  ``EvalCallback`` of 100 deterministic episodes every ``SB3_EVAL_FREQ`` env steps that stops at
  the threshold. Time: around ``model.learn``.

* Tianshou 2.x with the settings of its own test suite for these tasks (``TIANSHOU_TESTS``
  below): 100 test episodes after every epoch and whenever the training episodes' mean return
  reaches the threshold (``test_in_training``, on as in the suite's 1.x trainer), stopping at the
  threshold. Time: from the first collect to the return of ``run_training``.

Tianshou's numbers measured before this work (same protocol): PPO CartPole 22.0 s, A2C CartPole
39.6 s, PPO Pendulum 14.0 s; ``--reference`` prints them next to the table.

Run: ``python contrib/benchmarks/onpolicy_time_to_solve.py [--tasks ppo-cartpole,a2c-cartpole,
ppo-pendulum] [--frameworks rlblocks,sb3,tianshou] [--seeds 5] [--cap 120]`` (in .venv-bench
for the SB3 and Tianshou columns).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any

from _trials import run_json_trial

TASKS: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {"algo": "ppo", "env": "CartPole-v1", "threshold": 475.0},
    "a2c-cartpole": {"algo": "a2c", "env": "CartPole-v1", "threshold": 475.0},
    "ppo-pendulum": {"algo": "ppo", "env": "Pendulum-v1", "threshold": -250.0},
}
TIANSHOU_REFERENCE = {"ppo-cartpole": 22.0, "a2c-cartpole": 39.6, "ppo-pendulum": 14.0}
# RL Baselines3 Zoo (rl_zoo3 2.x hyperparams/ppo.yml and a2c.yml) for these envs.
SB3_ZOO: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {
        "n_envs": 8,
        "kwargs": {
            "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
            "ent_coef": 0.0, "learning_rate": 1e-3, "clip_range": 0.2,
        },
    },
    # a2c.yml names only n_envs 8 and ent_coef 0.0 for CartPole-v1; the rest are SB3's A2C
    # defaults (n_steps 5, RMSprop lr 7e-4, gamma 0.99, gae_lambda 1.0, vf_coef 0.5).
    "a2c-cartpole": {"n_envs": 8, "kwargs": {"ent_coef": 0.0}},
    "ppo-pendulum": {
        "n_envs": 4,
        "kwargs": {
            "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10, "ent_coef": 0.0,
            "learning_rate": 1e-3, "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4,
        },
    },
}
# Tianshou's test suite (thu-ml/tianshou, get_args defaults): test/discrete/test_ppo.py for PPO
# on CartPole, test/discrete/test_a2c_with_il.py (its A2C part) for A2C on CartPole, and
# test/continuous/test_ppo.py for PPO on Pendulum-v1. "shared" is one MLP body under actor and
# critic (the discrete tests), else two; "ortho" is the tests' orthogonal init (zero biases).
# epoch_num_steps is the suite's step_per_epoch; max_epochs is lifted (the cap bounds a run).
TIANSHOU_TESTS: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {
        "lr": 3e-4, "gamma": 0.99, "epoch_num_steps": 50_000, "step_per_collect": 2_000,
        "episode_per_collect": None, "repeat": 10, "batch_size": 64, "hidden": [64, 64],
        "train_envs": 20, "vf_coef": 0.5, "ent_coef": 0.0, "eps_clip": 0.2,
        "max_grad_norm": 0.5, "gae_lambda": 0.95, "return_scaling": False, "norm_adv": False,
        "value_clip": False, "shared": True, "ortho": True, "deterministic_eval": True,
    },
    "a2c-cartpole": {
        "lr": 1e-3, "gamma": 0.9, "epoch_num_steps": 50_000, "step_per_collect": None,
        "episode_per_collect": 16, "repeat": 1, "batch_size": 64, "hidden": [64, 64],
        "train_envs": 16, "vf_coef": 0.5, "ent_coef": 0.0, "max_grad_norm": None,
        "gae_lambda": 1.0, "return_scaling": False, "shared": True, "ortho": False,
        "deterministic_eval": False,
    },
    "ppo-pendulum": {
        "lr": 1e-3, "gamma": 0.95, "epoch_num_steps": 150_000, "step_per_collect": None,
        "episode_per_collect": 16, "repeat": 2, "batch_size": 128, "hidden": [64, 64],
        "train_envs": 16, "vf_coef": 0.25, "ent_coef": 0.0, "eps_clip": 0.2,
        "max_grad_norm": 0.5, "gae_lambda": 0.95, "return_scaling": True, "norm_adv": True,
        "value_clip": True, "shared": False, "ortho": True, "deterministic_eval": False,
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
            progress=False, run_dir=f"{tmp}/run", max_env_steps=2_000_000,
        )
    seconds = result.wall_seconds
    return {"solved": bool(result.solved) and seconds <= cap, "seconds": seconds,
            "env_steps": result.env_steps, "best": result.best_test_return}


def trial_sb3(
    task: str, seed: int, cap: float, sb3_eval_freq: int = SB3_EVAL_FREQ
) -> dict[str, Any]:
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
        eval_freq=max(sb3_eval_freq // zoo["n_envs"], 1), deterministic=True, verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=10_000_000, callback=[evaluate, Cap()])
    seconds = time.perf_counter() - start
    best = float(evaluate.best_mean_reward)
    return {"solved": best >= t["threshold"] and seconds <= cap, "seconds": seconds,
            "env_steps": int(model.num_timesteps), "best": best}


class _CapReached(Exception):
    pass


def trial_tianshou(task: str, seed: int, cap: float) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import A2C, PPO
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OnPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic
    from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic

    t, a = TASKS[task], TIANSHOU_TESTS[task]
    test_means: list[float] = []

    class RecordingCollector(Collector):
        """The test collector, recording each test's mean return."""

        def collect(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().collect(*args, **kwargs)
            if stats.returns_stat is not None:
                test_means.append(float(stats.returns_stat.mean))
            return stats

    env = gym.make(t["env"])
    train_envs = DummyVectorEnv([lambda: gym.make(t["env"]) for _ in range(a["train_envs"])])
    test_envs = DummyVectorEnv([lambda: gym.make(t["env"]) for _ in range(TEST_EPISODES)])
    np.random.seed(seed)
    torch.manual_seed(seed)
    train_envs.seed(seed)
    test_envs.seed(seed)
    obs_shape = env.observation_space.shape
    body = Net(state_shape=obs_shape, hidden_sizes=a["hidden"])
    critic_body = body if a["shared"] else Net(state_shape=obs_shape, hidden_sizes=a["hidden"])
    if isinstance(env.action_space, gym.spaces.Discrete):
        actor: torch.nn.Module = DiscreteActor(
            preprocess_net=body, action_shape=int(env.action_space.n)
        )
        critic: torch.nn.Module = DiscreteCritic(preprocess_net=critic_body)
        dist_fn: Any = torch.distributions.Categorical  # the actor outputs probabilities
    else:
        actor = ContinuousActorProbabilistic(
            preprocess_net=body, action_shape=env.action_space.shape, unbounded=True
        )
        critic = ContinuousCritic(preprocess_net=critic_body)

        def dist_fn(
            loc_scale: tuple[torch.Tensor, torch.Tensor],
        ) -> torch.distributions.Distribution:
            return torch.distributions.Independent(torch.distributions.Normal(*loc_scale), 1)

    if a["ortho"]:
        for m in list(actor.modules()) + list(critic.modules()):
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.orthogonal_(m.weight)
                torch.nn.init.zeros_(m.bias)
    policy = ProbabilisticActorPolicy(
        actor=actor, dist_fn=dist_fn, action_space=env.action_space,
        deterministic_eval=a["deterministic_eval"],
        action_scaling=isinstance(env.action_space, gym.spaces.Box),
    )
    common = {
        "policy": policy, "critic": critic, "optim": AdamOptimizerFactory(lr=a["lr"]),
        "vf_coef": a["vf_coef"], "ent_coef": a["ent_coef"], "max_grad_norm": a["max_grad_norm"],
        "gae_lambda": a["gae_lambda"], "gamma": a["gamma"], "return_scaling": a["return_scaling"],
    }
    if t["algo"] == "ppo":
        algorithm: Any = PPO(
            **common, eps_clip=a["eps_clip"], value_clip=a["value_clip"],
            advantage_normalization=a["norm_adv"],
        )
    else:
        algorithm = A2C(**common)
    buf = VectorReplayBuffer(20_000, buffer_num=len(train_envs))
    train_collector = Collector[CollectStats](algorithm, train_envs, buf)
    test_collector = RecordingCollector(algorithm, test_envs)

    t0 = time.perf_counter()

    def training_fn(epoch: int, env_step: int) -> None:
        if time.perf_counter() - t0 > cap:
            raise _CapReached

    capped = False
    try:
        algorithm.run_training(
            OnPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=test_collector,
                max_epochs=1_000_000,
                epoch_num_steps=a["epoch_num_steps"],
                collection_step_num_env_steps=a["step_per_collect"],
                collection_step_num_episodes=a["episode_per_collect"],
                update_step_num_repetitions=a["repeat"],
                test_step_num_episodes=TEST_EPISODES,
                batch_size=a["batch_size"],
                training_fn=training_fn,
                stop_fn=lambda mean_rewards: mean_rewards >= t["threshold"],
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
    return {"solved": best >= t["threshold"] and seconds <= cap and not capped,
            "seconds": seconds, "env_steps": int(train_collector.collect_step),
            "best": best if math.isfinite(best) else None}


TRIALS = {"rlblocks": trial_rlblocks, "sb3": trial_sb3, "tianshou": trial_tianshou}


def run_trial(fw: str, task: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--_trial", fw, "--_task", task, "--_seed", str(seed),
           "--cap", str(args.cap), "--sb3-eval-freq", str(args.sb3_eval_freq)]
    unsolved = {"solved": False, "seconds": math.inf}  # this script's medians count it slowest
    return run_json_trial(cmd, {}, timeout=args.cap + 120, failed=unsolved)


def median_seconds(results: list[dict[str, Any]]) -> float:
    return statistics.median(r["seconds"] if r.get("solved") else math.inf for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--frameworks", default="rlblocks,sb3,tianshou")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cap", type=float, default=120.0, help="seconds allowed per trial")
    parser.add_argument("--reference", action="store_true", help="print Tianshou's reference")
    parser.add_argument("--sb3-eval-freq", type=int, default=SB3_EVAL_FREQ,
                        help="env steps between SB3's 100-episode evaluations")
    parser.add_argument("--_trial")
    parser.add_argument("--_task")
    parser.add_argument("--_seed", type=int)
    args = parser.parse_args(argv)
    if args._trial:
        import torch

        torch.set_num_threads(1)
        extra = {"sb3_eval_freq": args.sb3_eval_freq} if args._trial == "sb3" else {}
        print(json.dumps(TRIALS[args._trial](args._task, args._seed, args.cap, **extra)),
              flush=True)
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
