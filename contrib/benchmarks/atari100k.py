#!/usr/bin/env python
"""Rainbow at the Atari 100k budget: rlblocks and Tianshou on the same Atari env pipeline.

What is measured: for each (game, framework, seed) one Rainbow agent trains from scratch for
``--steps`` agent steps (default 100,000 = 400,000 frames at frame skip 4, the Atari 100k budget
of Kaiser et al., 2020, warm-up steps included), then plays ``--test-episodes`` (default 10)
evaluation episodes of the unclipped game. A trial's score is the mean raw game score over those
episodes. The table has, per game and framework, the mean ± std over seeds of that score, the
per-seed scores, the human-normalised score of the mean ((score - random) / (human - random),
the random and human scores of DeepMind's dqn_zoo ``atari_data.py``), the median wall seconds of
training (setup, evaluation and any test run during training excluded), and the env steps done.
The script writes, under ``--out-dir``:

* ``results.jsonl``: one JSON line per finished trial (per-episode evaluation returns, seconds,
  env steps, settings, versions). A re-run skips the trials already there, so a long benchmark
  can be run in pieces and extended with more seeds or games later.
* ``README.md``: the table, headed by the command that produced it.

The env protocol (one for both libraries): ``gymnasium.make("ALE/{Game}-v5", frameskip=1,
repeat_action_probability=0.0, full_action_space=False)`` wrapped in gymnasium's
``AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False,
grayscale_obs=True, scale_obs=False)`` and ``rlblocks.run.FireReset`` (FIRE pressed after
each reset and each lost life in games that have it; Tianshou's own pipeline presses it at
each reset of its episodic-life envs, so after each lost life in training); training envs add
episodic life (a lost life ends the learning episode, the game goes on) and reward clipping to
[-1, 1]; evaluation envs keep raw scores and whole games. Both libraries get these envs from the
same function, ``rlblocks.run.make_atari`` (``sticky=0.0, fire_reset=True`` passed explicitly),
so the pipeline is identical, frame for frame; Tianshou additionally gets
``gymnasium.wrappers.FrameStackObservation(env, 4)`` outermost, because its policies read
stacked observations from the env, while rlblocks stacks the last 4 frames itself.
Tianshou's examples normally make their envs with its own
``tianshou.env.atari.atari_wrapper`` (shipped in the 2.0.1 wheel: ``wrap_deepmind`` on
``*NoFrameskip-v4`` ids, with a fire-on-reset wrapper, or EnvPool when installed); it is not used
here, so that an env difference cannot pass for a library difference.

Every trial runs in a fresh subprocess of this interpreter with ``torch.set_num_threads
(--torch-threads)`` (default 1) and prints one JSON line that the parent reads, so no library
inherits another's threads, RNG or caches. Trials are interleaved (for each seed, each game, both
frameworks) so that machine noise and an interrupted run fall on both alike. Seeds start at 100
(``--first-seed``), away from the seeds defaults were tuned on. ``--cap`` (wall seconds of
training per trial, default none) ends training early; the trial is still evaluated, marked
capped, and its env steps show how far it got. A capped trial counts as done for a later run
with the same or a smaller cap, not for one with a larger cap or none.

Contenders (each with its own published settings, nothing tuned here):

* rlblocks: ``rlblocks.train("rainbow", env="ALE/{Game}-v5", seed=s,
  config=rlblocks.run.atari100k_config("rainbow"), max_env_steps=--steps, loggers=[],
  progress=False, quiet=True, run_dir=<tmp>)``: rlblocks' Atari-100k preset, the Data-Efficient
  Rainbow settings of van Hasselt et al. (2019), "When to use parametric models in reinforcement
  learning?", table 1. When this script was written it held: one training env (the shared
  pipeline, stacks of 4 frames read from the buffer), 1,600 random warm-up steps, then one
  gradient step of batch 32 per agent step, 20-step returns, gamma 0.99, target update every
  2,000 gradient steps, Adam lr 1e-4 (eps 1.5e-4), gradient norm clipped at 10, double
  Q-learning, the Nature CNN with noisy (sigma0 0.1) dueling heads of 256 units over 51 atoms in
  [-10, 10], no epsilon (noisy nets explore), prioritized replay of 100,000 (alpha 0.5, beta 0.4
  annealed to 1 over 100k steps). Each row records the preset it ran as ``preset`` and the run's
  resolved env section as ``env_config``; the report prints both. Overridden:
  ``trainer.test_interval`` = the budget (rlblocks always ends a run on a test of the final
  policy; with this, that is the only in-training test, and its seconds, measured through the
  ``rlblocks_log`` hook, are taken out of the training time), ``trainer.checkpoint_interval`` =
  ``--checkpoint-every`` (default 10,000 env steps; each checkpoint holds the replay buffer, up
  to 0.7 GB, and the run directory lives under ``--work-dir``, so a trial stopped by a signal or
  a crash resumes bit-exactly from its last checkpoint when the script is run again; the
  directory is removed once the trial is evaluated, unless ``--keep-runs``) and ``stop_reward`` =
  1e12 (the whole budget runs). Training seconds add up over resumed parts.
  Evaluation: ``rlblocks.load(run_dir, which="latest").evaluate(
  episodes=--test-episodes, seed=s + 10000)``: the run's own test env (its ``env.wrappers``
  without ``train_wrappers``) and test-mode policy on stacked frames.
* Tianshou 2.0.1 with the defaults of its ``examples/atari/atari_rainbow.py`` (``main``'s keyword
  defaults and ``train_fn``, identical at tag v2.0.1 and at commit f2402056 of thu-ml/tianshou;
  copied into ``TIANSHOU_RAINBOW`` below): ``RainbowNet`` from the wheel's
  ``tianshou.env.atari.atari_network`` (Nature CNN, then noisy dueling heads of 512 units over 51
  atoms, softmax; unscaled 0-255 inputs as the example's ``scale_obs=0``), ``C51Policy``,
  ``RainbowDQN``, Adam lr 6.25e-5, gamma 0.99, 3-step returns, target update every 500 gradient
  steps, ``PrioritizedVectorReplayBuffer`` of 100,000 (alpha 0.5, beta 0.4 annealed to 1 over 5M
  env steps, weight normalisation, only the last frame stored, 4 stacked on read), 10 training
  envs, 10 env steps per collect, 0.1 gradient steps per env step (batch 32), epsilon-greedy
  exploration annealed from 1.0 to 0.05 over the first 1M env steps and 0.005 at test time,
  a warm-up collect of batch size x training envs = 320 env steps before training (it counts
  towards the budget), the example's seeding (``np.random.seed``, ``torch.manual_seed``, the
  env factory's seed). Tianshou
  collects with its networks in eval mode, so its noisy layers add no noise while acting and its
  exploration is the epsilon schedule. Departures from the example: the envs (see above); the
  10 training envs stepped in the trial's own process (``--tianshou-venv dummy``, the default:
  on this 2-core machine subprocess envs only add hand-offs; ``subproc`` gives the example's
  shared-memory subprocess envs); the trainer's check of the whole replay buffer for NaNs after
  every collect is switched off (``--tianshou-nan-check off``, the default). Tianshou 2.0.1's
  ``OnlineTrainer`` calls ``buffer.hasnull()`` after each collect, which reads back every stored
  transition with its 4 stacked frames: its cost grows with the buffer, so the trial slows down
  as it goes (a known regression: thu-ml/tianshou#1265, #1285). Measured here with the check on,
  Tianshou's Pong trial had done 19k of its 100k env steps after 62 minutes; the check only
  raises on a malformed buffer and changes nothing the agent learns, so it is left out rather
  than letting it decide the wall time; one
  epoch of budget - 320 env steps instead of 100 epochs of 100,000, with no test during training
  (no initial test, no per-epoch test, no ``stop_fn``), no logger, no checkpoint; the networks go
  to ``--device`` (default cpu; the example picks cuda when there is one). At the 100k budget the
  example's schedules barely move (epsilon ends at 0.905, beta at 0.412); ``--tianshou-anneal
  budget`` runs a variant whose epsilon and beta reach their final values at the end of the
  budget instead, reported as a separate row. Evaluation: a ``Collector`` over min(N, 10) test
  envs with ``exploration_noise=True`` (epsilon 0.005), as the example's test collector, playing
  N = ``--test-episodes`` episodes (with N <= 10, one whole game per env).

Run (in .venv-bench, see README.md; it also needs ale-py and opencv-python-headless):
``python contrib/benchmarks/atari100k.py --games Pong,Breakout --seeds 3
--out-dir docs/benchmarks/atari100k``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from typing import Any

from _trials import run_json_trial

FRAMEWORKS = ("rlblocks", "tianshou")
LABELS = {
    ("rlblocks", "example"): "rlblocks (DER preset)",
    ("tianshou", "example"): "Tianshou (example settings)",
    ("tianshou", "budget"): "Tianshou (schedules over the budget)",
}
EVAL_SEED_OFFSET = 10_000  # evaluation seeds differ from training seeds
STOP_NEVER = 1e12  # a stop reward no game reaches: every run spends its whole budget

#: Tianshou's examples/atari/atari_rainbow.py, ``main``'s keyword defaults (same at tag v2.0.1
#: and at commit f2402056 of thu-ml/tianshou), plus the schedules of its ``train_fn``.
TIANSHOU_RAINBOW: dict[str, Any] = {
    "scale_obs": False,
    "eps_test": 0.005,
    "eps_train": 1.0,
    "eps_train_final": 0.05,
    "eps_decay_steps": 1_000_000,  # train_fn: "linear decay in the first 1M steps"
    "buffer_size": 100_000,  # the example's own size, = the 100k budget
    "lr": 0.0000625,
    "gamma": 0.99,
    "num_atoms": 51,
    "v_min": -10.0,
    "v_max": 10.0,
    "noisy_std": 0.1,
    "dueling": True,
    "noisy": True,
    "prioritized": True,
    "alpha": 0.5,
    "beta": 0.4,
    "beta_final": 1.0,
    "beta_anneal_step": 5_000_000,
    "weight_norm": True,
    "n_step": 3,
    "target_update_freq": 500,
    "epoch": 100,  # not used: one epoch of the budget here
    "epoch_num_steps": 100_000,  # not used: one epoch of the budget here
    "step_per_collect": 10,
    "update_per_step": 0.1,
    "batch_size": 32,
    "training_envs": 10,
    "test_envs": 10,
    "frames_stack": 4,
}

#: Random and human scores (DeepMind dqn_zoo, dqn_zoo/atari_data.py, after Mnih et al., 2015)
#: of the 26 Atari 100k games, for the human-normalised column only.
RANDOM_HUMAN: dict[str, tuple[float, float]] = {
    "Alien": (227.8, 7127.7),
    "Amidar": (5.8, 1719.5),
    "Assault": (222.4, 742.0),
    "Asterix": (210.0, 8503.3),
    "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5),
    "Boxing": (0.1, 12.1),
    "Breakout": (1.7, 30.5),
    "ChopperCommand": (811.0, 7387.8),
    "CrazyClimber": (10780.5, 35829.4),
    "DemonAttack": (152.1, 1971.0),
    "Freeway": (0.0, 29.6),
    "Frostbite": (65.2, 4334.7),
    "Gopher": (257.6, 2412.5),
    "Hero": (1027.0, 30826.4),
    "Jamesbond": (29.0, 302.8),
    "Kangaroo": (52.0, 3035.0),
    "Krull": (1598.0, 2665.5),
    "KungFuMaster": (258.5, 22736.3),
    "MsPacman": (307.3, 6951.6),
    "Pong": (-20.7, 14.6),
    "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0),
    "RoadRunner": (11.5, 7845.0),
    "Seaquest": (68.4, 42054.7),
    "UpNDown": (533.4, 11693.2),
}

MISSING_ATARI = (
    "rlblocks.run is missing (core/src/rlblocks/atari.py): both libraries take their envs from "
    "rlblocks.run.make_atari, and rlblocks its preset from rlblocks.run.atari100k_config"
)


class _CapReached(Exception):
    pass


def env_id_for(game: str) -> str:
    return f"ALE/{game}-v5"


def _atari_module() -> Any:
    """``rlblocks.run`` (its Atari helpers), or an ImportError that says what is missing."""
    try:
        import rlblocks.run as atari
    except ImportError as exc:
        raise ImportError(f"{MISSING_ATARI} ({exc})") from exc
    for name in ("make_atari", "atari100k_config"):
        if not hasattr(atari, name):
            raise ImportError(f"rlblocks.run has no {name}")
    return atari


def protocol_env(game: str, train: bool) -> Any:
    """The shared env (one 84x84 uint8 frame per step): training or evaluation flavour."""
    return _atari_module().make_atari(
        env_id_for(game),
        train=train,
        sticky=0.0,
        episodic_life=train,
        clip_rewards=train,
        fire_reset=True,
    )


def _versions(*dists: str) -> dict[str, str]:
    out = {}
    for d in dists:
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            out[d] = "not installed"
    return out


# --------------------------------------------------------------------------------------------
# Trials (each in its own subprocess)
# --------------------------------------------------------------------------------------------


def trial_rlblocks(args: argparse.Namespace) -> dict[str, Any]:
    """rlblocks' Atari-100k Rainbow preset for the budget, then the evaluation episodes."""
    import rlblocks
    from rlblocks.plugins import hookimpl

    atari = _atari_module()
    game, seed, steps, cap = args.games, args._seed, args.steps, args.cap
    test_seconds = [0.0]

    class Watch:
        """Times the in-training tests, and ends training once past the cap."""

        @hookimpl
        def rlblocks_log(self, namespace: str, scalars: dict[str, float], step: int) -> None:
            if namespace in ("test", "test_screen") and scalars.get("steps_per_s"):
                test_seconds[0] += float(scalars["n_step"]) / float(scalars["steps_per_s"])

        @hookimpl
        def rlblocks_rollout_end(self, stats: Any, env_step: int, trainer: Any) -> None:
            if cap and trainer.state.wall_seconds > cap and not trainer.stop_requested:
                trainer.request_stop(f"cap of {cap:.0f} s reached")

    preset = atari.atari100k_config("rainbow")
    with contextlib.ExitStack() as stack:
        if args.work_dir:
            # a kept run directory: an interrupted trial resumes from its last checkpoint
            run_dir = os.path.join(args.work_dir, f"rlblocks-{game}-s{seed}-{steps}")
        else:
            run_dir = os.path.join(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="rlblocks-atari100k-")),
                "run",
            )
        saved = _saved_result(run_dir)
        if saved is not None and (
            saved.env_steps >= steps or str(saved.stop_reason).startswith("cap of")
        ):
            result = saved  # trained before; the evaluation did not finish
        elif _has_checkpoint(run_dir):
            result = rlblocks.resume(run_dir, hooks=[Watch()])
        else:
            if os.path.isdir(run_dir):
                shutil.rmtree(run_dir)  # began, died before its first checkpoint
            result = rlblocks.train(
                "rainbow",
                env=env_id_for(game),
                seed=seed,
                config=preset,
                max_env_steps=steps,
                # one test, at the end; checkpoints (with the buffer) as often as --checkpoint-every
                overrides=[
                    f"trainer.test_interval={steps}",
                    f"trainer.checkpoint_interval={min(steps, args.checkpoint_every)}",
                ],
                stop_reward=STOP_NEVER,
                device=args.device,
                loggers=[],
                progress=False,
                quiet=True,
                run_dir=run_dir,
                hooks=[Watch()],
            )
        if str(result.stop_reason).startswith("interrupted"):
            # stopped by a signal: not a result; the next run resumes from the checkpoint
            return {"error": f"{result.stop_reason} at {result.env_steps} env steps"}
        env_config = None
        config_file = os.path.join(run_dir, "config.json")
        if os.path.exists(config_file):
            with open(config_file, encoding="utf-8") as f:
                env_config = json.load(f).get("env")
        agent = rlblocks.load(run_dir, which="latest", device=args.device)
        t0 = time.perf_counter()
        ev = agent.evaluate(episodes=args.test_episodes, seed=seed + EVAL_SEED_OFFSET)
        eval_seconds = time.perf_counter() - t0
        if args.work_dir and not args.keep_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
    wall = float(result.wall_seconds)
    return {
        "returns": [float(x) for x in ev.returns],
        "train_seconds": wall - test_seconds[0],
        "wall_seconds": wall,
        "test_seconds_in_training": test_seconds[0],
        "eval_seconds": eval_seconds,
        "env_steps": int(result.env_steps),
        "gradient_steps": int(result.gradient_steps),
        "capped": bool(cap) and str(result.stop_reason).startswith("cap of"),
        "stop_reason": str(result.stop_reason),
        "preset": preset,
        "env_config": env_config,
        "versions": _versions("rlblocks", "torch", "gymnasium", "ale-py"),
    }


def _has_checkpoint(run_dir: str) -> bool:
    ckpt = os.path.join(run_dir, "checkpoints")
    return os.path.isdir(ckpt) and any(e.name.startswith("gen-") for e in os.scandir(ckpt))


def _saved_result(run_dir: str) -> Any:
    """The run's result.json as an object with the fields the trial reads (None: none yet)."""
    path = os.path.join(run_dir, "result.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return types.SimpleNamespace(**json.load(f))


def trial_tianshou(args: argparse.Namespace) -> dict[str, Any]:
    """Tianshou's atari_rainbow.py example for the budget, then the evaluation episodes."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import RainbowDQN
    from tianshou.algorithm.modelfree.c51 import C51Policy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, PrioritizedVectorReplayBuffer
    from tianshou.env.atari.atari_network import RainbowNet
    from tianshou.highlevel.env import EnvFactoryRegistered, EnvMode, VectorEnvType
    from tianshou.trainer import OffPolicyTrainerParams

    _atari_module()  # fail early, with the message, when the shared envs are missing
    h = TIANSHOU_RAINBOW
    game, seed, steps, cap = args.games, args._seed, args.steps, args.cap
    eps_horizon = steps if args.tianshou_anneal == "budget" else h["eps_decay_steps"]
    beta_horizon = steps if args.tianshou_anneal == "budget" else h["beta_anneal_step"]
    warmup = h["batch_size"] * h["training_envs"]
    venv = {"dummy": VectorEnvType.DUMMY, "subproc": VectorEnvType.SUBPROC_SHARED_MEM_AUTO}
    if steps <= warmup:
        raise ValueError(f"--steps must exceed Tianshou's warm-up collect of {warmup} env steps")

    class SharedAtariFactory(EnvFactoryRegistered):
        """Tianshou's env factory (its seeding, its subprocess envs) over the shared envs, as
        its AtariEnvFactory is over wrap_deepmind; stacked frames as its FrameStack gives."""

        def _create_env(self, mode: EnvMode) -> gym.Env:
            env = protocol_env(game, train=mode == EnvMode.TRAINING)
            return gym.wrappers.FrameStackObservation(env, h["frames_stack"])

    factory = SharedAtariFactory(task=env_id_for(game), venv_type=venv[args.tianshou_venv])
    envs = factory.create_envs(
        h["training_envs"], min(args.test_episodes, h["test_envs"]), seed=seed
    )
    np.random.seed(seed)
    torch.manual_seed(seed)
    c, height, width = envs.env.observation_space.shape
    n_actions = int(envs.env.action_space.n)
    net = RainbowNet(
        c=c,
        h=height,
        w=width,
        action_shape=n_actions,
        num_atoms=h["num_atoms"],
        noisy_std=h["noisy_std"],
        is_dueling=h["dueling"],
        is_noisy=h["noisy"],
    )
    policy = C51Policy(
        model=net,
        action_space=envs.env.action_space,
        num_atoms=h["num_atoms"],
        v_min=h["v_min"],
        v_max=h["v_max"],
        eps_training=h["eps_train"],
        eps_inference=h["eps_test"],
    )
    algorithm = RainbowDQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=h["lr"]),
        gamma=h["gamma"],
        n_step_return_horizon=h["n_step"],
        target_update_freq=h["target_update_freq"],
    ).to(args.device)
    buffer = PrioritizedVectorReplayBuffer(
        h["buffer_size"],
        buffer_num=len(envs.training_envs),
        ignore_obs_next=True,
        save_only_last_obs=True,
        stack_num=h["frames_stack"],
        alpha=h["alpha"],
        beta=h["beta"],
        weight_norm=h["weight_norm"],
    )
    if args.tianshou_nan_check == "off":
        # the trainer's whole-buffer NaN scan after every collect (see the module docstring)
        buffer.hasnull = lambda: False  # type: ignore[method-assign]
    train_collector = Collector[CollectStats](
        algorithm, envs.training_envs, buffer, exploration_noise=True
    )

    t0 = time.perf_counter()

    def training_fn(epoch: int, env_step: int) -> None:
        """The example's schedules (linear, then flat), over its horizons or the budget."""
        if cap and time.perf_counter() - t0 > cap:
            raise _CapReached
        frac = min(env_step / eps_horizon, 1.0)
        policy.set_eps_training(h["eps_train"] - frac * (h["eps_train"] - h["eps_train_final"]))
        frac = min(env_step / beta_horizon, 1.0)
        buffer.set_beta(h["beta"] - frac * (h["beta"] - h["beta_final"]))

    capped = False
    train_collector.reset()
    train_collector.collect(n_step=warmup)  # the example's warm-up, outside a training step
    try:
        algorithm.run_training(
            OffPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=None,
                max_epochs=1,
                epoch_num_steps=steps - warmup,
                collection_step_num_env_steps=h["step_per_collect"],
                test_step_num_episodes=args.test_episodes,
                batch_size=h["batch_size"],
                update_step_num_gradient_steps_per_sample=h["update_per_step"],
                training_fn=training_fn,
                test_in_training=False,
                logger=None,
                verbose=False,
                show_progress=False,
            )
        )
    except _CapReached:
        capped = True
    train_seconds = time.perf_counter() - t0
    # run_training resets the collector's step count after the warm-up collect
    env_steps = warmup + int(train_collector.collect_step)
    envs.training_envs.close()

    test_collector = Collector[CollectStats](algorithm, envs.test_envs, exploration_noise=True)
    t1 = time.perf_counter()
    test_collector.reset()
    stats = test_collector.collect(n_episode=args.test_episodes)
    eval_seconds = time.perf_counter() - t1
    envs.test_envs.close()
    return {
        "returns": [float(x) for x in np.asarray(stats.returns).ravel()],
        "train_seconds": train_seconds,
        "wall_seconds": train_seconds,
        "test_seconds_in_training": 0.0,
        "eval_seconds": eval_seconds,
        "env_steps": env_steps,
        "capped": capped,
        "settings": {
            **h,
            "eps_decay_steps": eps_horizon,
            "beta_anneal_step": beta_horizon,
            "device": args.device,
            "venv": args.tianshou_venv,
            "nan_check": args.tianshou_nan_check,
        },
        "versions": _versions("tianshou", "torch", "gymnasium", "ale-py", "rlblocks"),
    }


# --------------------------------------------------------------------------------------------
# Parent: schedule, record, report
# --------------------------------------------------------------------------------------------


def _variant(fw: str, args: argparse.Namespace) -> str:
    return args.tianshou_anneal if fw == "tianshou" else "example"


def _key(r: dict[str, Any]) -> tuple[str, str, str, int, int]:
    return (r["framework"], r.get("variant", "example"), r["game"], int(r["seed"]), r["steps"])


def _is_done(r: dict[str, Any], cap: float | None) -> bool:
    """Whether a recorded trial stands for this run: finished, and not capped more tightly."""
    if "error" in r:
        return False
    if not r.get("capped"):
        return True
    return cap is not None and r.get("cap") is not None and cap <= r["cap"]


def load_results(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_trial(fw: str, game: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_trial",
        fw,
        "--games",
        game,
        "--_seed",
        str(seed),
        "--steps",
        str(args.steps),
        "--test-episodes",
        str(args.test_episodes),
        "--torch-threads",
        str(args.torch_threads),
        "--device",
        args.device,
        "--tianshou-anneal",
        args.tianshou_anneal,
        "--tianshou-venv",
        args.tianshou_venv,
        "--tianshou-nan-check",
        args.tianshou_nan_check,
        "--work-dir",
        args.work_dir,
        "--checkpoint-every",
        str(args.checkpoint_every),
    ]
    if args.keep_runs:
        cmd.append("--keep-runs")
    if args.cap:
        cmd += ["--cap", str(args.cap)]
    base = {
        "framework": fw,
        "variant": _variant(fw, args),
        "game": game,
        "seed": seed,
        "steps": args.steps,
        "test_episodes": args.test_episodes,
        "cap": args.cap,
        "torch_threads": args.torch_threads,
    }
    return run_json_trial(cmd, base, timeout=args.cap + args.grace if args.cap else None)


def _mean_std(xs: list[float]) -> str:
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.fmean(xs):.1f} ± {statistics.stdev(xs):.1f}"


def _hns(game: str, xs: list[float]) -> str:
    if not xs or game not in RANDOM_HUMAN:
        return "–"
    random, human = RANDOM_HUMAN[game]
    return f"{(statistics.fmean(xs) - random) / (human - random):.3f}"


def build_report(results: list[dict[str, Any]], command: str) -> str:
    """The markdown table from every finished trial (the latest row of a repeated trial)."""
    latest: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}
    for r in results:
        if "error" not in r:
            latest[_key(r)] = r
    ok = list(latest.values())
    games = sorted({r["game"] for r in ok})
    groups = sorted({(r["framework"], r.get("variant", "example")) for r in ok})
    lines = [
        "# Rainbow at the Atari 100k budget: rlblocks vs Tianshou",
        "",
        f"Produced by `{command}` (script: `contrib/benchmarks/atari100k.py`, whose docstring "
        "lists both libraries' settings and the shared env pipeline). Final = the mean raw game "
        "score (no reward clipping, whole games) over each trial's evaluation episodes after "
        "training; mean ± std over seeds, and per seed. HNS = human-normalised score of the mean "
        "over seeds (0 random, 1 human; dqn_zoo's scores). Train s = median wall seconds of "
        "training (setup, evaluation and in-training tests excluded). Env steps = agent steps "
        "(4 frames each) done, warm-up included. * = training ended at the cap.",
        "",
        "| game | framework | seeds | eval episodes | final | per seed | HNS | train s | "
        "env steps |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for game in games:
        for fw, variant in groups:
            rows = sorted(
                (
                    r
                    for r in ok
                    if r["game"] == game
                    and r["framework"] == fw
                    and r.get("variant", "example") == variant
                ),
                key=lambda r: (r["steps"], r["seed"]),
            )
            if not rows:
                continue
            finals = [statistics.fmean(r["returns"]) for r in rows if r["returns"]]
            per_seed = ", ".join(
                f"{r['seed']}: {statistics.fmean(r['returns']):.1f}"
                + ("*" if r.get("capped") else "")
                for r in rows
                if r["returns"]
            )
            episodes = sorted({len(r["returns"]) for r in rows})
            secs = statistics.median(r["train_seconds"] for r in rows)
            steps = sorted({int(r["env_steps"]) for r in rows})
            steps_cell = f"{steps[0]:,}" if len(steps) == 1 else f"{steps[0]:,}–{steps[-1]:,}"
            label = LABELS.get((fw, variant), f"{fw} ({variant})")
            lines.append(
                f"| {game} | {label} | {len(rows)} | {'/'.join(map(str, episodes))} | "
                f"{_mean_std(finals)} | {per_seed} | {_hns(game, finals)} | {secs:.0f} | "
                f"{steps_cell} |"
            )
    lines += [
        "",
        "Reading it: rlblocks' DER preset takes a gradient step every agent step after a "
        "1,600-step warm-up (98,400 at the 100k budget), Tianshou's example one every 10 agent "
        "steps (about 9,970): most of the difference in training seconds. With the example's "
        "schedules (`--tianshou-anneal example`), Tianshou's exploration epsilon is still 0.905 "
        "when the 100k steps end, so its agent acts mostly at random while it learns; "
        "`--tianshou-anneal budget` anneals over the budget instead (a separate row). Both "
        "libraries play the same envs, FIRE after every reset and lost life included (not part of"
        " DER's protocol).",
    ]
    budgets = sorted({r["steps"] for r in ok})
    if len(budgets) > 1:
        lines += ["", f"Note: the table mixes budgets {budgets} (see results.jsonl)."]
    presets = [r for r in ok if r["framework"] == "rlblocks" and r.get("preset")]
    if presets:
        last = presets[-1]
        lines += [
            "",
            "rlblocks preset (`rlblocks.run.atari100k_config('rainbow')`, latest trial):",
            "",
            f"```json\n{json.dumps(last['preset'], sort_keys=True)}\n```",
        ]
        if last.get("env_config") is not None:
            lines += [
                "",
                "rlblocks run's resolved env section (from its config.json):",
                "",
                f"```json\n{json.dumps(last['env_config'], sort_keys=True)}\n```",
            ]
    tianshou = [r for r in ok if r["framework"] == "tianshou" and r.get("settings")]
    if tianshou:
        lines += [
            "",
            "Tianshou settings (latest trial; `venv` and `nan_check`: see the script's docstring):",
            "",
            f"```json\n{json.dumps(tianshou[-1]['settings'], sort_keys=True)}\n```",
        ]
    versions = {k: v for r in ok for k, v in r.get("versions", {}).items()}
    if versions:
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))]
    done = {_key(r) for r in ok}
    errors = [r for r in results if "error" in r and _key(r) not in done]  # not since re-run
    if errors:
        lines += ["", "Failed trials:", ""]
        lines += [
            f"- {r['framework']} {r['game']} seed {r['seed']}: {_gist(r['error'])}" for r in errors
        ]
    return "\n".join(lines) + "\n"


def _gist(error: str) -> str:
    """The traceback's last line (the exception) of a failed trial."""
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _write_report(results: list[dict[str, Any]], out_dir: str, command: str) -> str:
    report = build_report(results, command)
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write(report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--games", default="Pong,Breakout", help="ALE game names, comma-separated")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--steps", type=int, default=100_000, help="agent steps per trial")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--test-episodes", type=int, default=10, help="evaluation episodes")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="torch device of both libraries' nets")
    parser.add_argument(
        "--cap", type=float, default=None, help="wall seconds of training per trial (none)"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=1800.0,
        help="with --cap: seconds more before a trial's process is killed (setup, evaluation)",
    )
    parser.add_argument(
        "--tianshou-anneal",
        choices=("example", "budget"),
        default="example",
        help="Tianshou's epsilon and beta schedules: the example's horizons (1M and 5M env "
        "steps) or the budget",
    )
    parser.add_argument(
        "--tianshou-venv",
        choices=("dummy", "subproc"),
        default="dummy",
        help="Tianshou's training envs: in the trial's process, or the example's subprocesses",
    )
    parser.add_argument(
        "--tianshou-nan-check",
        choices=("off", "on"),
        default="off",
        help="Tianshou's whole-buffer NaN check after every collect (slows down as the buffer "
        "fills: thu-ml/tianshou#1265)",
    )
    parser.add_argument(
        "--work-dir",
        default=os.path.join(os.path.expanduser("~"), ".cache", "rlblocks-atari100k"),
        help="where rlblocks trials keep their run directories, so that an interrupted trial "
        "resumes from its last checkpoint ('' for a temporary directory)",
    )
    parser.add_argument(
        "--checkpoint-every", type=int, default=10_000, help="env steps between checkpoints"
    )
    parser.add_argument("--keep-runs", action="store_true", help="keep finished run directories")
    parser.add_argument("--out-dir", default="docs/benchmarks/atari100k")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--_trial", choices=FRAMEWORKS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._trial:  # child: one trial, one JSON line
        import torch

        torch.set_num_threads(args.torch_threads)
        fn = trial_rlblocks if args._trial == "rlblocks" else trial_tianshou
        print(json.dumps(fn(args)), flush=True)
        return 0

    games = [g.strip() for g in args.games.split(",") if g.strip()]
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for fw in frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}; choose from {','.join(FRAMEWORKS)}")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "results.jsonl")
    results = load_results(path)
    command = "python contrib/benchmarks/atari100k.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a != "--report-only"
    )
    if not args.report_only:
        try:
            _atari_module()
        except ImportError as exc:
            print(f"nothing run: {exc}", file=sys.stderr)
            print(_write_report(results, args.out_dir, command))
            return 1
        done = {_key(r) for r in results if _is_done(r, args.cap)}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for game in games:
                for fw in frameworks:
                    if (fw, _variant(fw, args), game, seed, args.steps) in done:
                        print(f"{fw} {game} seed {seed}: done already, skipped", flush=True)
                        continue
                    r = run_trial(fw, game, seed, args)
                    results.append(r)
                    with open(path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(r) + "\n")
                    if "error" in r:
                        print(f"{fw} {game} seed {seed}: ERROR {r['error']}", flush=True)
                    else:
                        score = statistics.fmean(r["returns"]) if r["returns"] else math.nan
                        print(
                            f"{fw} {game} seed {seed}: final {score:.1f} over "
                            f"{len(r['returns'])} episodes, {r['env_steps']} env steps, "
                            f"train {r['train_seconds']:.0f} s, eval {r['eval_seconds']:.0f} s"
                            + (" (capped)" if r.get("capped") else ""),
                            flush=True,
                        )
                    _write_report(results, args.out_dir, command)
    print(_write_report(results, args.out_dir, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
