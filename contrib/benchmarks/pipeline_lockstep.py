#!/usr/bin/env python
"""Do rlblocks and Tianshou train DDPG, TD3 and SAC alike, collection and all? A lockstep run.

``update_equivalence.py`` compares one gradient step on a shared buffer. This script compares
the whole training pipeline of the MuJoCo table (``mujoco_benchmark.py``'s trial functions and
settings): random warm-up, acting with exploration noise, storing, sampling, targets, updates
and how the trainer interleaves them. Every random draw of training is made equal:

1. rlblocks trains, recording its warm-up actions, its exploration noise and the replay rows it
   samples, and saving its initial networks.
2. Tianshou trains with the same draws replayed (``Box.sample``, ``GaussianNoise`` and
   ``ReplayBuffer.sample_indices`` patched to hand them out in order), starting from rlblocks'
   initial weights (copied as ``update_equivalence.py`` copies them).
3. A control: rlblocks trains again with its critic's initial weights changed in the last bit
   (relative 1e-7, float32's rounding), so the same pipeline meets a rounding-sized difference.

The env's own randomness is removed (Hopper's ``reset_noise_scale`` set to 0), and rlblocks'
collector restarts its episode after the warm-up, as Tianshou's ``run_training`` does (rlblocks
itself continues that episode). TD3 draws its target smoothing noise from torch inside each
step, the same shape in both libraries: torch is seeded alike at the first gradient step, so
both draw the same numbers. For TD3 rlblocks also leaves the smoothed target action unclipped
and Tianshou's delayed actor takes rlblocks' phase (its first step at the second gradient step):
the two by-design differences ``update_equivalence.py`` names, removed so that anything else
shows. SAC draws from torch both when it acts (its exploration is its sampled action) and inside
each step (the next action of the target, the reparameterised action of the actor's loss), in
the same order and shapes in both libraries: torch is seeded alike at the first action the
policy samples after the warm-up (and again at the first gradient step, as for TD3), and
rlblocks' actor computes as Tianshou's does: its log-probability (``update_equivalence.py``'s
``tianshou_log_prob``: the same mathematics rounded Tianshou's way, the one by-design
difference in SAC's step) and its mean and log-std one half at a time (rlblocks' one head
holds both; a one-row matrix product rounds differently for 3 output columns than for 6, so
every action would differ from Tianshou's in the last bits). Printed: the first training step
at which the policies' acting outputs (DDPG and TD3: the actor's action before exploration
noise; SAC: the sampled action) differ by more than 1e-6 ... 1e-1, and the worst relative
difference of the critic and actor losses over the first k updates, for Tianshou against
rlblocks and for the control against rlblocks. Two pipelines that compute the same thing
differ by rounding at first, and that difference then grows as any rounding difference grows
in this chaotic task (contacts, ReLU kinks, Adam): the control shows how fast. A different
pipeline (a transition stored or sampled differently, another target, another interleaving)
shows as a jump well above rounding at the step where it first acts.

Run (in the benchmark venv, see README.md): ``python contrib/benchmarks/pipeline_lockstep.py
[--algo ddpg|td3|sac] [--seed 300] [--steps 35000]`` (DDPG's and TD3's random warm-up is 25,000
steps, so 35,000 compares 10,000 gradient steps, about five minutes per run here; SAC's is 10,000
steps, so ``--algo sac --steps 20000`` compares 10,000).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _trials import run_json_trial  # this folder, put on sys.path above

#: torch's seed at the first gradient step of every run (TD3's smoothing noise comes from it)
STEP_SEED = 12345
THRESHOLDS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
WINDOWS = (1, 10, 100, 300, 1_000, 3_000, 10_000)


def _no_reset_noise() -> None:
    """Hopper's resets start from its fixed initial pose (no random perturbation)."""
    from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

    init = HopperEnv.__init__

    def without_noise(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["reset_noise_scale"] = 0.0
        init(self, *args, **kwargs)

    HopperEnv.__init__ = without_noise  # type: ignore[method-assign]


def two_heads(actor: Any) -> Any:
    """rlblocks' SAC actor's ``distribution`` with its one head (mean and log-std rows
    together) multiplied as Tianshou's two heads are, one half at a time: the same numbers,
    but a one-row matrix product rounds differently for 3 output columns than for 6, so
    acting (one observation at a time) would otherwise differ in the last bits at every step."""
    import torch.nn.functional as F

    a = actor.act_dim

    def distribution(obs: Any) -> Any:
        h = actor.body(actor.encoder(obs))
        w, b = actor.head.weight, actor.head.bias
        mean, log_std = F.linear(h, w[:a], b[:a]), F.linear(h, w[a:], b[a:])
        return mean, log_std.clamp(actor.log_std_min, actor.log_std_max)

    return distribution


def run_rlblocks(algo: str, seed: int, steps: int, out: str, perturb: bool) -> dict[str, Any]:
    """Train rlblocks' ``algo``, recording its random draws and losses into ``out`` (.npz)."""
    import importlib

    import torch
    from mujoco_benchmark import trial_rlblocks

    from rlblocks.collect import Collector
    from rlblocks.replay import SharedRing
    from rlblocks.trainers import OffPolicyTrainer

    policy_cls = getattr(
        importlib.import_module(f"rlblocks_algo_{algo}.{algo}"), f"{algo.upper()}Policy"
    )

    rec: dict[str, list[Any]] = {k: [] for k in ("warm", "noise", "mu", "idx", "closs", "aloss")}
    random_actions = Collector._random_actions

    def record_warm_up(self: Any, n: int) -> Any:
        actions = random_actions(self, n)
        rec["warm"].append(np.array(actions, dtype=np.float64).reshape(-1))
        return actions

    before_loop = OffPolicyTrainer._before_loop

    def warm_up_then_restart(self: Any) -> None:
        before_loop(self)
        self.train_collector.reset()  # Tianshou's run_training restarts the episode here

    def noise(self: Any, act: np.ndarray, batch: Any) -> np.ndarray:
        drawn = self.noise(act.shape, self._rng)
        rec["noise"].append(np.array(drawn, dtype=np.float64).reshape(-1))
        rec["mu"].append(np.array(act, dtype=np.float64).reshape(-1))
        return act + drawn  # the MuJoCo preset keeps noisy actions unclipped, as Tianshou does

    uniform = SharedRing.uniform

    def record_rows(self: Any, rng: Any, batch_size: int) -> np.ndarray:
        if not rec["idx"]:
            torch.manual_seed(STEP_SEED)  # the first gradient step: see STEP_SEED
        rows = uniform(self, rng, batch_size)
        rec["idx"].append(rows.copy())
        return rows

    learn = policy_cls.learn

    def record_losses(self: Any, batch: Any, **kwargs: Any) -> Any:
        stats = learn(self, batch, **kwargs)
        rec["closs"].append(float(stats["loss/critic"]))
        rec["aloss"].append(float(stats["loss/actor"]))
        return stats

    init = policy_cls.__init__

    def keep_start(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        torch.save(copy.deepcopy(self), out + ".policy.pt")
        if algo == "sac":  # SAC's actor computed as Tianshou computes it (see above)
            from update_equivalence import tianshou_log_prob

            self.actor.distribution = two_heads(self.actor)
            self.actor.forward = tianshou_log_prob(self.actor)
        if perturb:  # rounding-sized changes to the critic's start (its own generator)
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for p in self.critic.parameters():
                    p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=gen))
                for target, online in zip(
                    self.critic_target.net.parameters(), self.critic.parameters(), strict=True
                ):
                    target.copy_(online)

    Collector._random_actions = record_warm_up  # type: ignore[method-assign]
    OffPolicyTrainer._before_loop = warm_up_then_restart  # type: ignore[method-assign]
    if algo == "sac":  # SAC's exploration is its sampled action, drawn from torch
        forward = policy_cls.forward

        def record_act(self: Any, batch: Any, state: Any = None, **kwargs: Any) -> Any:
            if self.training and not rec["mu"]:
                torch.manual_seed(STEP_SEED)  # the first action the policy samples
            out = forward(self, batch, state, **kwargs)
            if self.training:  # a training step's action (tests act deterministically)
                rec["mu"].append(np.array(out.act, dtype=np.float64).reshape(-1))
            return out

        policy_cls.forward = record_act
    else:
        policy_cls.exploration_noise = noise
    SharedRing.uniform = record_rows  # type: ignore[method-assign]
    policy_cls.learn = record_losses
    policy_cls.__init__ = keep_start
    extra = ["algo.target_action_clip=false"] if algo == "td3" else []
    result = trial_rlblocks(algo, "Hopper-v5", seed, steps, 5_000, extra=extra)
    np.savez(out, **{k: np.array(v) for k, v in rec.items()})
    return {"curve": result["curve"]}


def run_tianshou(algo: str, seed: int, steps: int, out: str, draws: str) -> dict[str, Any]:
    """Train Tianshou's ``algo`` on rlblocks' recorded draws and initial weights."""
    import gymnasium as gym
    import mujoco_benchmark as bench
    import torch
    from tianshou.algorithm.modelfree import ddpg as tianshou_ddpg
    from tianshou.algorithm.modelfree import sac as tianshou_sac
    from tianshou.algorithm.modelfree import td3 as tianshou_td3
    from tianshou.data import ReplayBuffer
    from tianshou.exploration import GaussianNoise
    from update_equivalence import network_pairs, sync

    recorded = np.load(draws)
    warm, noise, rows = iter(recorded["warm"]), iter(recorded["noise"]), iter(recorded["idx"])
    ours = torch.load(draws + ".policy.pt", weights_only=False)  # our own file, just written
    rec: dict[str, list[Any]] = {k: [] for k in ("mu", "closs", "aloss")}

    def replay_warm_up(self: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        return next(warm).astype(self.dtype)

    def replay_noise(self: Any, size: Any) -> np.ndarray:
        return next(noise).reshape(size)

    sample_indices = ReplayBuffer.sample_indices

    first_step = [True]

    def replay_rows(self: Any, batch_size: int | None) -> np.ndarray:
        if not batch_size:
            return sample_indices(self, batch_size)
        if first_step[0]:
            torch.manual_seed(STEP_SEED)  # the first gradient step: see STEP_SEED
            first_step[0] = False
        return next(rows)

    policy_cls = tianshou_ddpg.ContinuousPolicyWithExplorationNoise
    add_noise = policy_cls.add_exploration_noise

    def record_mu(self: Any, act: Any, batch: Any) -> Any:
        rec["mu"].append(np.array(act, dtype=np.float64).reshape(-1))
        return add_noise(self, act, batch)

    algo_cls = {"ddpg": tianshou_ddpg.DDPG, "td3": tianshou_td3.TD3, "sac": tianshou_sac.SAC}[algo]
    sac_forward = tianshou_sac.SACPolicy.forward
    seeded = [False]

    def seed_first_action(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.is_within_training_step and not seeded[0]:
            torch.manual_seed(STEP_SEED)  # the first action the policy samples
            seeded[0] = True
        return sac_forward(self, *args, **kwargs)

    update = algo_cls._update_with_batch

    def record_losses(self: Any, batch: Any) -> Any:
        stats = update(self, batch)
        if algo == "ddpg":
            rec["closs"].append(float(stats.critic_loss))
        else:  # rlblocks reports the two critics' losses summed
            rec["closs"].append(float(stats.critic1_loss) + float(stats.critic2_loss))
        rec["aloss"].append(float(stats.actor_loss))
        return stats

    build = bench._tianshou_algorithm

    def same_start(*args: Any, **kwargs: Any) -> Any:
        theirs = build(*args, **kwargs)
        for pairs in network_pairs(algo, ours, theirs)[0].values():
            sync(pairs, None)
        if algo == "td3":
            theirs._cnt = 1  # the delayed actor's first step at the second gradient step
        return theirs

    gym.spaces.Box.sample = replay_warm_up  # type: ignore[method-assign]
    GaussianNoise.__call__ = replay_noise  # type: ignore[method-assign]
    ReplayBuffer.sample_indices = replay_rows  # type: ignore[method-assign]
    policy_cls.add_exploration_noise = record_mu  # type: ignore[method-assign]
    if algo == "sac":
        tianshou_sac.SACPolicy.forward = seed_first_action  # type: ignore[method-assign]
    algo_cls._update_with_batch = record_losses
    bench._tianshou_algorithm = same_start
    result = bench.trial_tianshou(algo, "Hopper-v5", seed, steps, 5_000)
    np.savez(out, **{k: np.array(v) for k, v in rec.items()})
    return {"curve": result["curve"]}


def divergence(ref: Any, other: Any) -> list[str]:
    """Where ``other``'s acting means and losses leave ``ref``'s."""
    n = min(len(ref["mu"]), len(other["mu"]))
    gap = np.abs(ref["mu"][:n] - other["mu"][:n]).max(axis=1)
    lines = []
    for thr in THRESHOLDS:
        where = np.flatnonzero(gap > thr)
        lines.append(
            f"  acting output differs by more than {thr:g}: first at training step "
            + (f"{where[0]}" if len(where) else f"never in {n}")
        )
    for key, name in (("closs", "critic loss"), ("aloss", "actor loss")):
        m = min(len(ref[key]), len(other[key]))
        rel = np.abs(ref[key][:m] - other[key][:m]) / np.maximum(np.abs(ref[key][:m]), 1e-12)
        worst = ", ".join(f"{k}: {rel[:k].max():.1e}" for k in WINDOWS if k <= m)
        lines.append(f"  {name}, worst relative difference over the first k updates: {worst}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("ddpg", "td3", "sac"), default="ddpg")
    parser.add_argument("--seed", type=int, default=300)
    parser.add_argument("--steps", type=int, default=35_000, help="env steps, warm-up included")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--_side", choices=("rlblocks", "control", "tianshou"), default=None)
    parser.add_argument("--_out", default=None)
    parser.add_argument("--_draws", default=None)
    args = parser.parse_args(argv)
    from mujoco_benchmark import TIANSHOU_EXAMPLES

    settings = TIANSHOU_EXAMPLES[args.algo]
    warm_up, epoch = settings["start_timesteps"], settings["epoch_num_steps"]
    if args.steps < warm_up + epoch:  # Tianshou trains in whole epochs after the warm-up
        parser.error(
            f"--steps must be at least {warm_up + epoch} for {args.algo}: the {warm_up:,}-step "
            f"warm-up and one epoch of {epoch:,}"
        )

    if args._side:  # child: one run, one JSON line
        import torch

        torch.set_num_threads(args.torch_threads)
        _no_reset_noise()
        if args._side == "tianshou":
            out = run_tianshou(args.algo, args.seed, args.steps, args._out, args._draws)
        else:
            perturb = args._side == "control"
            out = run_rlblocks(args.algo, args.seed, args.steps, args._out, perturb)
        print(json.dumps(out), flush=True)
        return 0

    with tempfile.TemporaryDirectory(prefix="rlblocks-lockstep-") as tmp:
        paths = {side: os.path.join(tmp, f"{side}.npz") for side in ("rlblocks", "control")}
        paths["tianshou"] = os.path.join(tmp, "tianshou.npz")
        curves = {}
        for side in ("rlblocks", "tianshou", "control"):
            cmd = [
                sys.executable, os.path.abspath(__file__), "--_side", side, "--algo",
                args.algo, "--seed", str(args.seed), "--steps", str(args.steps), "--torch-threads",
                str(args.torch_threads), "--_out", paths[side], "--_draws", paths["rlblocks"],
            ]  # fmt: skip
            result = run_json_trial(cmd, {})
            if "error" in result:
                print(f"the {side} run failed: {result['error']}", file=sys.stderr)
                return 1
            curves[side] = result["curve"]
        runs = {side: np.load(path) for side, path in paths.items()}
        name = args.algo.upper()
        print(f"{name} on Hopper-v5 (no reset noise), seed {args.seed}, {args.steps} env steps")
        for side, curve in curves.items():
            print(f"{side:>9} test returns: " + ", ".join(f"{s}: {v:.1f}" for s, v in curve))
        print("Tianshou on rlblocks' draws and start, against rlblocks:")
        print("\n".join(divergence(runs["rlblocks"], runs["tianshou"])))
        print("Control: rlblocks, its critic started a last bit apart, against rlblocks:")
        print("\n".join(divergence(runs["rlblocks"], runs["control"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
