#!/usr/bin/env python
"""Distributional DQNs, time to solve CartPole-v1: rlblocks against Tianshou and SB3-contrib.

Algorithms: C51, Rainbow, QR-DQN, IQN and FQF. For each algorithm, seed and framework this
measures the wall seconds from the start of training until the mean return over 100 test
episodes reaches 475 (CartPole-v1's reward threshold), tests included, with a cap (default
600 s). The markdown table has, per algorithm and framework, the seconds of every seed and
whether it solved, the median over seeds (an unsolved run counts as slower than any solved one),
how many seeds solved, the median env steps, and for rlblocks the ratio of its median to the
faster peer's. Below the table, per algorithm, the speed-up (faster peer's median / rlblocks'
median) against the target of the issue: rlblocks at least 2x faster than the faster peer.

Every (framework, algorithm, seed) trial runs in a fresh subprocess of this interpreter (no
framework inherits another's torch threads, RNG state or warm caches) and prints one JSON line
that the parent reads. Trials are interleaved: for each seed every algorithm, for each algorithm
every framework, so machine noise falls on all contenders alike. Every trial calls
``torch.set_num_threads(--torch-threads)`` (default 1). Seeds start at 100 (``--first-seed``):
rlblocks' defaults for these algorithms were tuned on seeds 0-2, so the reported seeds differ.

An algorithm whose rlblocks plugin is not installed is skipped with a line saying so (when
rlblocks is among ``--frameworks``); so is the SB3 column when sb3-contrib is missing.

Contenders (hyperparameters copied from the named sources, not tuned here):

* rlblocks: ``rlblocks.train(algo, env="CartPole-v1", seed=s, loggers=[], progress=False,
  run_dir=<tmp>)`` with the defaults of each algorithm's spec
  (``plugins/algos/<algo>/src/rlblocks_algo_<algo>/_spec.py``; the output records them). When
  written, all five share 8 training envs, buffer 20k, 8 env steps per collect, 0.25 gradient
  steps per env step, batch 64, 1,000 warm-up steps, lr 1e-3, n_step 3, a test of 100 episodes
  every 2,500 env steps, stop at the env's threshold (475), a budget of 100k env steps; gamma
  0.9 for C51, Rainbow and FQF, 0.99 for QR-DQN (32 quantiles) and IQN (hidden [64, 64], 8 + 8
  tau samples, 32 quantile samples for acting); Rainbow adds prioritized replay (alpha 0.5,
  beta 0.4 annealed to 1 over 100k steps). Since then some defaults were retuned, and C51 and
  Rainbow have CartPole presets (``env_defaults``: gamma 0.99 on the support [0, 100]; Rainbow
  adds noisy exploration alone, tau 0.02, alpha 0.6); the output records the settings a run
  resolves for CartPole-v1 (the spec's defaults with its matching presets on top). The budget
  is rlblocks' own default and is kept: a run that spends it unsolved counts as unsolved. A
  ``rlblocks_rollout_end`` hook ends a run (``trainer.request_stop``) once its wall seconds
  pass the cap. 20 test envs (the specs' ``num_test_envs``) run the 100 test episodes.
  Time: ``result.wall_seconds``.
* Tianshou 2.0.1 with the settings of its own test suite (``TIANSHOU_TESTS`` below; files
  test/discrete/test_{c51,rainbow,qrdqn,iqn,fqf}.py, identical at tag v2.0.1 and on master of
  2026-04-03): epsilon-greedy 0.1 annealed to 0.01 between 10k and 50k env steps (each test's
  ``train_fn``), 0.05 at test time, 100 test envs and 100 test episodes per test,
  ``test_in_training`` on, a warm-up collect of batch_size x training envs steps, no prioritized
  replay (the default test functions; the ``test_p*`` variants add it with gamma 0.95).
  Departures from the suite: stop at 475 instead of its 195 for CartPole-v1, the epoch limit is
  lifted so the cap bounds the run, no logger, no checkpoints. Time: from the warm-up collect to
  the return of ``run_training`` (its initial test and every later test included). Tianshou
  2.0.1's trainer scans its whole replay buffer for NaNs after every collect
  (``buffer.hasnull()``, a known regression: thu-ml/tianshou#1265); the tables time Tianshou as
  released, with it; ``--tianshou-nan-check off`` times it without (Rainbow, seed 103, on a
  busy machine: 59.1 s with the scan, 50.9 s without; not yet measured over seeds on a quiet one).
* SB3-contrib QR-DQN (for ``qrdqn`` only) with the RL Baselines3 Zoo hyperparameters for
  CartPole-v1 (``SB3_ZOO_QRDQN`` below, rl_zoo3 2.9.2), one training env as in the zoo, and an
  ``EvalCallback`` of 100 deterministic episodes on 10 eval envs every ``--sb3-eval-freq`` env
  steps (default 2,500: rlblocks' test interval here), stopping at 475 through
  ``StopTrainingOnRewardThreshold``. The zoo's budget (5e4 steps) is lifted with epsilon's
  schedule kept (see ``trial_sb3``). Time: around ``model.learn``.

Run (in .venv-bench, which holds rlblocks, Tianshou, Stable-Baselines3 and sb3-contrib):
``python contrib/benchmarks/value_time_to_solve.py --algos c51,rainbow,qrdqn,iqn,fqf --seeds 5
--first-seed 100 --cap 600 --frameworks rlblocks,tianshou,sb3 --out table.md``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from typing import Any

from _trials import finite, gist, median_cell, median_seconds, run_json_trial

#: what a trial that did not run to its end counts as
UNSOLVED = {"solved": False, "seconds": None}


ENV_ID = "CartPole-v1"
THRESHOLD = 475.0  # gymnasium's reward_threshold for CartPole-v1
TEST_EPISODES = 100
ALGOS = ("c51", "rainbow", "qrdqn", "iqn", "fqf")
FRAMEWORKS = ("rlblocks", "tianshou", "sb3")
LABELS = {"rlblocks": "rlblocks", "tianshou": "Tianshou (tests)", "sb3": "SB3-contrib (zoo)"}
NAMES = {"c51": "C51", "rainbow": "Rainbow", "qrdqn": "QR-DQN", "iqn": "IQN", "fqf": "FQF"}
SB3_ALGOS = ("qrdqn",)  # the only one of the five that sb3-contrib implements
TARGET_SPEEDUP = 2.0  # the target: rlblocks >= 2x faster than the faster peer

# RL Baselines3 Zoo hyperparameters for QR-DQN on CartPole-v1 ("# Tuned"), read from
# rl_zoo3/hyperparams/qrdqn.yml in the rl_zoo3 2.9.2 wheel on PyPI:
#   n_timesteps: 5e4, policy: 'MlpPolicy', learning_rate: 2.3e-3, batch_size: 64,
#   buffer_size: 100000, learning_starts: 1000, gamma: 0.99, target_update_interval: 10,
#   train_freq: 256, gradient_steps: 128, exploration_fraction: 0.16,
#   exploration_final_eps: 0.04, policy_kwargs: "dict(net_arch=[256, 256], n_quantiles=10)"
# The yml names no n_envs, so the zoo trains on one env.
SB3_ZOO_QRDQN: dict[str, Any] = {
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
    "policy_kwargs": {"net_arch": [256, 256], "n_quantiles": 10},
}
SB3_ZOO_N_TIMESTEPS = 50_000
SB3_TOTAL_TIMESTEPS = 10_000_000  # lifted budget: the threshold or the cap ends the run
SB3_EVAL_FREQ = 2_500  # env steps between SB3's evaluations (rlblocks' test_interval here)
SB3_EVAL_ENVS = 10

# Tianshou's test suite, thu-ml/tianshou test/discrete/test_<algo>.py, get_args defaults (the
# files are the same at tag v2.0.1 and on master of 2026-04-03). Keys every file shares:
# eps_test 0.05, eps_train 0.1 (train_fn: 0.1 up to 10k env steps, linear down to 0.01 at 50k,
# then 0.01), buffer_size 20000, gamma 0.9, n_step 3, target_update_freq 320, batch_size 64,
# num_test_envs 100 (= test episodes per test), test_in_training, VectorReplayBuffer (the
# prioritized_replay flag is off by default), DummyVectorEnv, np.random.seed / torch.manual_seed /
# training_envs.seed / test_envs.seed with the same seed, both collectors with
# exploration_noise=True, a warm-up collect of batch_size * num_training_envs steps within
# policy_within_training_step. Each suite stops at 195 for CartPole-v1; here at 475.
_TIANSHOU_SHARED: dict[str, Any] = {
    "eps_test": 0.05,
    "eps_train": 0.1,
    "buffer_size": 20_000,
    "gamma": 0.9,
    "n_step": 3,
    "target_update_freq": 320,
    "batch_size": 64,
}
# test/discrete/test_c51.py: lr 1e-3, num_atoms 51, v_min -10, v_max 10, epoch 10 x 8000 env
#   steps, 8 env steps per collect, update_per_step 0.125, hidden_sizes [128, 128, 128, 128],
#   8 training envs; Net(softmax=True, num_atoms=51), C51Policy, C51.
_TIANSHOU_C51: dict[str, Any] = {
    **_TIANSHOU_SHARED,
    "lr": 1e-3,
    "num_atoms": 51,
    "v_min": -10.0,
    "v_max": 10.0,
    "suite_epochs": 10,
    "epoch_num_steps": 8000,
    "step_per_collect": 8,
    "update_per_step": 0.125,
    "hidden_sizes": [128, 128, 128, 128],
    "training_envs": 8,
}
TIANSHOU_TESTS: dict[str, dict[str, Any]] = {
    "c51": _TIANSHOU_C51,
    # test/discrete/test_rainbow.py: the C51 values above plus noisy_std 0.1; Net with
    # dueling_param whose value and advantage heads use NoisyLinear(noisy_std), C51Policy,
    # RainbowDQN. (test_prainbow adds prioritized replay with gamma 0.95; not used.)
    "rainbow": {**_TIANSHOU_C51, "noisy_std": 0.1},
    # test/discrete/test_qrdqn.py: lr 1e-3, num_quantiles 200, epoch 10 x 10000 env steps,
    # 10 env steps per collect, update_per_step 0.1, hidden_sizes [128, 128, 128, 128],
    # 10 training envs; Net(softmax=False, num_atoms=200), QRDQNPolicy, QRDQN(num_quantiles=200).
    "qrdqn": {
        **_TIANSHOU_SHARED,
        "lr": 1e-3,
        "num_quantiles": 200,
        "suite_epochs": 10,
        "epoch_num_steps": 10_000,
        "step_per_collect": 10,
        "update_per_step": 0.1,
        "hidden_sizes": [128, 128, 128, 128],
        "training_envs": 10,
    },
    # test/discrete/test_iqn.py: lr 3e-3, sample_size 32, online_sample_size 8,
    # target_sample_size 8, num_cosines 64, epoch 10 x 10000 env steps, 10 env steps per collect,
    # update_per_step 0.1, hidden_sizes [64, 64, 64], 10 training envs; feature Net with hidden
    # sizes [64, 64] and output 64, ImplicitQuantileNetwork(num_cosines=64), IQNPolicy, IQN.
    "iqn": {
        **_TIANSHOU_SHARED,
        "lr": 3e-3,
        "sample_size": 32,
        "online_sample_size": 8,
        "target_sample_size": 8,
        "num_cosines": 64,
        "suite_epochs": 10,
        "epoch_num_steps": 10_000,
        "step_per_collect": 10,
        "update_per_step": 0.1,
        "hidden_sizes": [64, 64, 64],
        "training_envs": 10,
    },
    # test/discrete/test_fqf.py: lr 3e-3 (Adam), fraction_lr 2.5e-9 (RMSprop), num_fractions 32,
    # num_cosines 64, ent_coef 10.0, epoch 10 x 10000 env steps, 10 env steps per collect,
    # update_per_step 0.1, hidden_sizes [64, 64, 64], 10 training envs; feature Net as for IQN,
    # FullQuantileFunction(hidden_sizes=[64, 64, 64], num_cosines=64),
    # FractionProposalNetwork(32, input_dim), FQFPolicy, FQF.
    "fqf": {
        **_TIANSHOU_SHARED,
        "lr": 3e-3,
        "fraction_lr": 2.5e-9,
        "num_fractions": 32,
        "num_cosines": 64,
        "ent_coef": 10.0,
        "suite_epochs": 10,
        "epoch_num_steps": 10_000,
        "step_per_collect": 10,
        "update_per_step": 0.1,
        "hidden_sizes": [64, 64, 64],
        "training_envs": 10,
    },
}


class _CapReached(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Trials (each runs in its own subprocess and returns a dict)
# --------------------------------------------------------------------------------------------


def trial_rlblocks(algo: str, seed: int, cap: float) -> dict[str, Any]:
    """One rlblocks run with the algorithm's defaults; ended by a hook once past the cap."""
    import rlblocks
    from rlblocks.plugins import hookimpl

    class StopAtCap:
        """Ends the run after the first collect past the cap (rlblocks has no time limit).

        It acts after every collect, not in ``rlblocks_should_stop``: that hook is asked only
        after complete tests, and a test screened out by its first episodes is not one.
        """

        @hookimpl
        def rlblocks_rollout_end(self, stats: Any, env_step: int, trainer: Any) -> None:
            if trainer.state.wall_seconds > cap and not trainer.stop_requested:
                trainer.request_stop(f"cap of {cap:.0f} s reached")

    with tempfile.TemporaryDirectory(prefix="rlblocks-value-bench-") as tmp:
        t0 = time.perf_counter()
        result = rlblocks.train(
            algo,
            env=ENV_ID,
            seed=seed,
            loggers=[],
            progress=False,
            run_dir=os.path.join(tmp, "run"),
            hooks=[StopAtCap()],
        )
        outer = time.perf_counter() - t0
    seconds = float(result.wall_seconds)
    return {
        "solved": bool(result.solved) and seconds <= cap,
        "seconds": seconds,
        "outer_seconds": outer,  # our clock around train(): setup included
        "env_steps": int(result.env_steps),
        "best_test_return": finite(result.best_test_return),
        "stop_reason": str(result.stop_reason),
    }


def _tianshou_algorithm(algo: str, a: dict[str, Any], env: Any) -> tuple[Any, Any]:
    """(policy, algorithm) built as test/discrete/test_<algo>.py builds them."""
    from tianshou.algorithm import C51, FQF, IQN, QRDQN, RainbowDQN
    from tianshou.algorithm.modelfree.c51 import C51Policy
    from tianshou.algorithm.modelfree.fqf import FQFPolicy
    from tianshou.algorithm.modelfree.iqn import IQNPolicy
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory, RMSpropOptimizerFactory
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import (
        FractionProposalNetwork,
        FullQuantileFunction,
        ImplicitQuantileNetwork,
        NoisyLinear,
    )

    obs_shape = env.observation_space.shape
    n_actions = int(env.action_space.n)
    eps = {"eps_training": a["eps_train"], "eps_inference": a["eps_test"]}
    common = {
        "optim": AdamOptimizerFactory(lr=a["lr"]),
        "gamma": a["gamma"],
        "n_step_return_horizon": a["n_step"],
        "target_update_freq": a["target_update_freq"],
    }
    if algo in ("c51", "rainbow"):
        dueling = None
        if algo == "rainbow":
            std = a["noisy_std"]
            layer = {"linear_layer": lambda x, y: NoisyLinear(x, y, std)}
            dueling = (layer, layer)
        net = Net(
            state_shape=obs_shape,
            action_shape=n_actions,
            hidden_sizes=a["hidden_sizes"],
            softmax=True,
            num_atoms=a["num_atoms"],
            dueling_param=dueling,
        )
        policy: Any = C51Policy(
            model=net,
            action_space=env.action_space,
            num_atoms=a["num_atoms"],
            v_min=a["v_min"],
            v_max=a["v_max"],
            **eps,
        )
        cls = RainbowDQN if algo == "rainbow" else C51
        return policy, cls(policy=policy, **common)
    if algo == "qrdqn":
        net = Net(
            state_shape=obs_shape,
            action_shape=n_actions,
            hidden_sizes=a["hidden_sizes"],
            softmax=False,
            num_atoms=a["num_quantiles"],
        )
        policy = QRDQNPolicy(model=net, action_space=env.action_space, **eps)
        return policy, QRDQN(policy=policy, num_quantiles=a["num_quantiles"], **common)
    # IQN and FQF: a feature net whose last hidden layer is its output, then the quantile head
    features = Net(
        state_shape=obs_shape,
        action_shape=a["hidden_sizes"][-1],
        hidden_sizes=a["hidden_sizes"][:-1],
        softmax=False,
    )
    if algo == "iqn":
        model = ImplicitQuantileNetwork(
            preprocess_net=features, action_shape=n_actions, num_cosines=a["num_cosines"]
        )
        policy = IQNPolicy(
            model=model,
            action_space=env.action_space,
            sample_size=a["sample_size"],
            online_sample_size=a["online_sample_size"],
            target_sample_size=a["target_sample_size"],
            **eps,
        )
        return policy, IQN(policy=policy, **common)
    if algo == "fqf":
        model = FullQuantileFunction(
            preprocess_net=features,
            action_shape=n_actions,
            hidden_sizes=a["hidden_sizes"],
            num_cosines=a["num_cosines"],
        )
        policy = FQFPolicy(
            model=model,
            fraction_model=FractionProposalNetwork(a["num_fractions"], model.input_dim),
            action_space=env.action_space,
            **eps,
        )
        return policy, FQF(
            policy=policy,
            fraction_optim=RMSpropOptimizerFactory(lr=a["fraction_lr"]),
            num_fractions=a["num_fractions"],
            ent_coef=a["ent_coef"],
            **common,
        )
    raise ValueError(f"no Tianshou contender for {algo!r}")


def trial_tianshou(algo: str, seed: int, cap: float, nan_check: str = "on") -> dict[str, Any]:
    """One Tianshou run with its test suite's settings for ``algo``, stopping at 475."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.torch_utils import policy_within_training_step

    a = TIANSHOU_TESTS[algo]
    test_means: list[float] = []

    class TestRecorder(Collector):
        """Keeps each test's mean return, so a capped run still reports its best test."""

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
    test_envs.seed(seed)
    policy, algorithm = _tianshou_algorithm(algo, a, env)
    buf = VectorReplayBuffer(a["buffer_size"], buffer_num=len(train_envs))
    if nan_check == "off":  # the trainer's whole-buffer NaN scan after every collect
        buf.hasnull = lambda: False  # type: ignore[method-assign]
    train_collector = Collector[CollectStats](algorithm, train_envs, buf, exploration_noise=True)
    test_collector = TestRecorder(algorithm, test_envs, exploration_noise=True)

    t0 = time.perf_counter()

    def training_fn(epoch: int, env_step: int) -> None:
        if time.perf_counter() - t0 > cap:
            raise _CapReached
        eps0 = a["eps_train"]  # the suite's schedule: eps0 to 10k steps, 0.1 * eps0 from 50k
        frac = min(max((env_step - 10_000) / 40_000, 0.0), 1.0)
        policy.set_eps_training(eps0 - frac * 0.9 * eps0)

    capped = False
    with policy_within_training_step(policy):
        train_collector.reset()
        train_collector.collect(n_step=a["batch_size"] * a["training_envs"])
    try:
        algorithm.run_training(
            OffPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=test_collector,
                max_epochs=1_000_000,  # lifted from a["suite_epochs"]: the cap bounds the run
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
    solved = best >= THRESHOLD and seconds <= cap and not capped
    return {
        "nan_check": nan_check,
        "solved": solved,
        "seconds": seconds,
        "env_steps": int(train_collector.collect_step),
        "best_test_return": finite(best),
        "n_evals": len(test_means),
        "stop_reason": "cap" if capped else ("solved" if best >= THRESHOLD else "ended"),
    }


def trial_sb3(algo: str, seed: int, cap: float, eval_freq: int) -> dict[str, Any]:
    """One SB3-contrib QR-DQN run with the zoo's CartPole-v1 hyperparameters."""
    if algo not in SB3_ALGOS:
        raise ValueError(f"no SB3-contrib contender for {algo!r}")
    from sb3_contrib import QRDQN
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        CallbackList,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env

    class StopAtCap(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = time.perf_counter()
            self.capped = False

        def _on_step(self) -> bool:
            self.capped = time.perf_counter() - self.t0 > cap
            return not self.capped

    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    eval_env = make_vec_env(ENV_ID, n_envs=SB3_EVAL_ENVS, seed=seed + 10_000)
    hp = dict(SB3_ZOO_QRDQN)
    # SB3 anneals epsilon over exploration_fraction * total_timesteps; with the lifted budget the
    # fraction is scaled so that epsilon still reaches its final value after 0.16 * 5e4 = 8,000
    # steps, as in the zoo (the learning rate is constant, so nothing else depends on the budget)
    hp["exploration_fraction"] *= SB3_ZOO_N_TIMESTEPS / SB3_TOTAL_TIMESTEPS
    model = QRDQN("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **hp)
    eval_cb = EvalCallback(
        eval_env,
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD, verbose=0),
        n_eval_episodes=TEST_EPISODES,
        eval_freq=eval_freq,  # one training env: callback calls == env steps
        deterministic=True,
        verbose=0,
    )
    cap_cb = StopAtCap()
    t0 = cap_cb.t0 = time.perf_counter()
    model.learn(total_timesteps=SB3_TOTAL_TIMESTEPS, callback=CallbackList([eval_cb, cap_cb]))
    seconds = time.perf_counter() - t0
    best = float(eval_cb.best_mean_reward)
    return {
        "solved": best >= THRESHOLD and seconds <= cap,
        "seconds": seconds,
        "env_steps": int(model.num_timesteps),
        "best_test_return": finite(best),
        "n_evals": eval_cb.n_calls // eval_freq,
        "stop_reason": "cap" if cap_cb.capped else ("solved" if best >= THRESHOLD else "ended"),
    }


# --------------------------------------------------------------------------------------------
# Parent: what is installed, scheduling, the table
# --------------------------------------------------------------------------------------------


def rlblocks_algo_status(algos: list[str]) -> dict[str, tuple[str | None, str]]:
    """Per algorithm: (its plugin's version or None when it cannot run, a note for the output).

    Uses rlblocks' registry, which reads entry-point metadata and the spec module (attrs only,
    no torch), so a missing or broken plugin is known before any trial starts.
    """
    try:
        from rlblocks.plugins import get_registry
        from rlblocks.run import build_config, spec_lookup, to_dict
    except ImportError as exc:
        return {algo: (None, f"rlblocks is not importable ({exc})") for algo in algos}
    registry = get_registry("algo")
    out: dict[str, tuple[str | None, str]] = {}
    for algo in algos:
        hint = f"pip install --no-deps -e plugins/algos/{algo}"
        if algo not in registry:
            out[algo] = (None, f"rlblocks plugin {algo!r} is not installed ({hint})")
            continue
        try:
            entry = registry.resolve(algo)
            # the settings rlblocks.train resolves for this env id: the spec's defaults with
            # its matching presets on top, through the same function a run uses
            resolved = to_dict(
                build_config(algo, flags={"env": {"id": ENV_ID}}, spec_lookup=spec_lookup)
            )
        except Exception as exc:  # a plugin that is half written or broken
            out[algo] = (None, f"rlblocks plugin {algo!r} does not load: {exc}")
            continue
        defaults = {key: resolved[key] for key in ("algo", "buffer", "trainer")}
        note = f"{entry.distribution} {entry.version}, defaults {json.dumps(defaults)}"
        out[algo] = (entry.version or "?", note)
    return out


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run_trial_subprocess(fw: str, algo: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one trial in a fresh process of this interpreter and return its JSON result."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_trial",
        fw,
        "--_algo",
        algo,
        "--_seed",
        str(seed),
        "--cap",
        str(args.cap),
        "--torch-threads",
        str(args.torch_threads),
        "--sb3-eval-freq",
        str(args.sb3_eval_freq),
        "--tianshou-nan-check",
        args.tianshou_nan_check,
    ]
    base = {"framework": fw, "algo": algo, "seed": seed}
    return run_json_trial(cmd, base, timeout=args.cap + args.grace, failed=UNSOLVED)


def _seed_cell(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "error"
    if r.get("seconds") is None:
        return "-"
    return f"{r['seconds']:.1f} {'yes' if r.get('solved') else 'no'}"


def speedup(ours: float | None, peer: float | None, cap: float) -> tuple[str, bool | None]:
    """Peer median / rlblocks median as text (a bound when one side is unsolved), target met?"""
    if ours is None or peer is None:
        return "-", None
    if math.isinf(ours) and math.isinf(peer):
        return "neither solved in the median", None
    if math.isinf(peer):  # the peer took more than the cap
        bound = cap / ours
        return f">{bound:.2f}x", True if bound >= TARGET_SPEEDUP else None
    if math.isinf(ours):  # rlblocks took more than the cap
        return f"<{peer / cap:.2f}x", False if peer / cap < TARGET_SPEEDUP else None
    value = peer / ours
    return f"{value:.2f}x", value >= TARGET_SPEEDUP


def _ratio_cell(ours: float | None, peer: float | None, cap: float) -> str:
    """rlblocks median / peer median (below 1: rlblocks faster), bounded where unsolved."""
    if ours is None or peer is None:
        return "-"
    if math.isinf(ours) and math.isinf(peer):
        return "both unsolved"
    if math.isinf(peer):
        return f"<{ours / cap:.2f}"
    if math.isinf(ours):
        return f">{cap / peer:.2f}"
    return f"{ours / peer:.2f}"


def _faster_peer(med: dict[str, float | None]) -> str | None:
    peers = {fw: m for fw, m in med.items() if fw != "rlblocks" and m is not None}
    return min(peers, key=peers.__getitem__) if peers else None


def build_report(
    results: dict[str, dict[str, list[dict[str, Any]]]], seeds: list[int], cap: float
) -> tuple[str, list[str]]:
    """The markdown table and the per-algorithm speed-up lines."""
    head = [
        "algorithm",
        "framework",
        *[f"seed {s}" for s in seeds],
        "median s",
        "solved",
        "median env steps",
        "rlblocks / faster peer",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    speedups: list[str] = []
    for algo, per_fw in results.items():
        med = {fw: median_seconds(rs) for fw, rs in per_fw.items()}
        best = _faster_peer(med)
        for fw, rs in per_fw.items():
            steps = [r["env_steps"] for r in rs if r.get("env_steps") is not None]
            ratio = ""
            if fw == "rlblocks" and best is not None:
                ratio = f"{_ratio_cell(med['rlblocks'], med[best], cap)} vs {LABELS[best]}"
            row = [
                NAMES[algo],
                LABELS[fw],
                *[_seed_cell(r) for r in rs],
                median_cell(med[fw], cap),
                f"{sum(bool(r.get('solved')) for r in rs)}/{len(rs)}",
                f"{statistics.median(steps):,.0f}" if steps else "-",
                ratio,
            ]
            lines.append("| " + " | ".join(row) + " |")
        if "rlblocks" in per_fw:
            if best is None:
                speedups.append(f"- {NAMES[algo]}: no peer result to compare with")
                continue
            text, met = speedup(med["rlblocks"], med[best], cap)
            verdict = {True: "met", False: "MISSED", None: "undecided"}[met]
            speedups.append(
                f"- {NAMES[algo]}: {text} vs {LABELS[best]} "
                f"(target {TARGET_SPEEDUP:.0f}x: {verdict})"
            )
    return "\n".join(lines), speedups


def main(argv: list[str] | None = None) -> int:
    """Parse the command line; run one trial (child) or the whole benchmark (parent)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--algos", default=",".join(ALGOS), help="subset of " + ",".join(ALGOS))
    parser.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="subset of " + ",".join(FRAMEWORKS)
    )
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=100,
        help="seeds run from here up (rlblocks' defaults were tuned on 0-2)",
    )
    parser.add_argument("--cap", type=float, default=600.0, help="seconds allowed per trial")
    parser.add_argument(
        "--grace",
        type=float,
        default=120.0,
        help="extra seconds before a trial subprocess is killed (imports, setup, a last test)",
    )
    parser.add_argument(
        "--sb3-eval-freq",
        type=int,
        default=SB3_EVAL_FREQ,
        help="env steps between SB3-contrib's 100-episode evaluations",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads in every trial (0: leave torch's default); the same for all",
    )
    parser.add_argument("--out", metavar="PATH", help="also write the markdown report here")
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
            out = trial_rlblocks(args._algo, args._seed, args.cap)
        elif args._trial == "tianshou":
            out = trial_tianshou(args._algo, args._seed, args.cap, args.tianshou_nan_check)
        else:
            out = trial_sb3(args._algo, args._seed, args.cap, args.sb3_eval_freq)
        print(json.dumps(out), flush=True)
        return 0

    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for a in algos:
        if a not in ALGOS:
            parser.error(f"unknown algorithm {a!r}; choose from {','.join(ALGOS)}")
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}; choose from {','.join(FRAMEWORKS)}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))

    notes: list[str] = []  # skips and what rlblocks ran with, for the printout and the report
    if "rlblocks" in frameworks:
        status = rlblocks_algo_status(algos)
        for algo in list(algos):
            version, note = status[algo]
            if version is None:
                notes.append(f"skipped {NAMES[algo]}: {note}")
                algos.remove(algo)
            else:
                notes.append(f"rlblocks {NAMES[algo]}: {note}")
    if "sb3" in frameworks:
        if importlib.util.find_spec("sb3_contrib") is None:
            notes.append(
                "skipped SB3-contrib: sb3-contrib is not installed (pip install sb3-contrib)"
            )
            frameworks.remove("sb3")
        elif not any(a in SB3_ALGOS for a in algos):
            notes.append("no SB3 rows: of these algorithms sb3-contrib has only QR-DQN")

    def contenders(algo: str) -> list[str]:
        return [fw for fw in frameworks if fw != "sb3" or algo in SB3_ALGOS]

    results = {a: {fw: [] for fw in contenders(a)} for a in algos}
    script = sys.argv[0] if sys.argv and sys.argv[0] else os.path.relpath(__file__)
    command = shlex.join(["python", script, *argv])  # the venv's own path says nothing to a reader
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    header = [
        f"Time to solve {ENV_ID}: seconds until the mean of {TEST_EPISODES} test episodes "
        f">= {THRESHOLD:.0f}, cap {args.cap:.0f} s, seeds {seeds}, torch threads per trial "
        f"{args.torch_threads or 'default'}, SB3 eval every {args.sb3_eval_freq} env steps",
        f"command: `{command}`",
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load average at start {load}",
        "versions: "
        + ", ".join(
            f"{d} {_version(d)}"
            for d in (
                "torch",
                "rlblocks",
                "tianshou",
                "stable-baselines3",
                "sb3-contrib",
                "gymnasium",
                "numpy",
            )
        )
        + f", python {platform.python_version()}",
    ]
    for line in (*header, *notes):
        print(line, flush=True)
    if not algos:
        print("nothing to run")
        if args.out:
            with open(args.out, "w") as fh:
                fh.write("\n".join([*header, *notes, "nothing to run"]) + "\n")
        return 0

    for seed in seeds:
        for algo in algos:
            for fw in contenders(algo):
                r = run_trial_subprocess(fw, algo, seed, args)
                results[algo][fw].append(r)
                if r.get("error"):
                    extra = f"error: {gist(r['error'])}"
                else:
                    extra = (
                        f"{r['seconds']:7.1f} s solved={r['solved']} env_steps={r['env_steps']} "
                        f"best={r.get('best_test_return')} stop={r.get('stop_reason')}"
                    )
                print(f"  seed {seed} {algo:<7} {LABELS[fw]:<17} {extra}", flush=True)

    table, speedups = build_report(results, seeds, args.cap)
    legend = (
        f"Per seed: seconds and whether the mean of {TEST_EPISODES} test episodes reached "
        f"{THRESHOLD:.0f} within the {args.cap:.0f} s cap (no: the seconds the run took before "
        "it stopped). Medians count an unsolved run as slower than any solved one (>cap). "
        "rlblocks / faster peer: ratio of medians, below 1 means rlblocks is faster."
    )
    speed = [
        f"Speed-up, faster peer's median / rlblocks' median (target: >= {TARGET_SPEEDUP:.0f}x):",
        *speedups,
    ]
    errors = [
        f"error: {NAMES[r['algo']]} {LABELS[r['framework']]} seed {r['seed']}: {gist(r['error'])}"
        for per_fw in results.values()
        for rs in per_fw.values()
        for r in rs
        if r.get("error")
    ]
    report = "\n\n".join(
        part
        for part in (
            "\n".join(f"- {line}" if i else line for i, line in enumerate(header)),
            "\n".join(f"- {n}" for n in notes),
            table,
            legend,
            "\n".join(speed) if speedups else "",
            "\n".join(errors),
        )
        if part
    )
    print("\n" + table + "\n\n" + legend + ("\n\n" + "\n".join(speed) if speedups else ""))
    for line in errors:
        print(line)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cap": args.cap, "seeds": seeds, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
