#!/usr/bin/env python
"""Collector throughput: rlblocks against Tianshou and a bare gymnasium loop, in one run.

Measures environment steps per second of a collector stepping 8 ``CartPole-v1`` envs in-process
(a dummy vector env), replay-buffer writes included, in two modes:

* ``random``: uniformly random actions;
* ``net``: actions from a DQN-sized Q-network (obs 4 -> 128 -> 128 -> 2, ReLU, argmax over a
  batch of 8 observations, no autograd).

Peers, measured in the same process and interleaved with rlblocks so that machine noise hits
every contender alike:

* Tianshou: ``Collector`` + ``DummyVectorEnv`` (8 envs) + ``VectorReplayBuffer(100_000, 8)``;
  ``collect(n_step=N, random=True)`` for ``random``, and a ``DiscreteQLearningPolicy`` (the DQN
  policy of Tianshou 2.x, called ``DQNPolicy`` in 1.x) around Tianshou's ``Net`` with hidden sizes
  (128, 128) for ``net``;
* bare loop: one ``gym.make("CartPole-v1")`` stepped with ``env.action_space.sample()``, reset on
  termination or truncation, nothing stored (an upper bound for any Python collector).

Each contender is built once and warmed up; then each repeat times one ``collect(n_step=N)`` call
per contender with ``time.perf_counter``. The table shows the median (and min/max) over repeats,
followed by the ratios and the targets: absolute steps/s, and rlblocks' median over the bare
loop's (>= 0.65 random, >= 0.40 net; a ratio taken in one run does not depend on how fast or busy
the machine is). The exit status is 0 whatever the numbers; contenders whose package is not
installed are skipped with a note.

Run: ``python contrib/benchmarks/collector_speed.py [--repeats 5] [--n-step 16000]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

ENV_ID = "CartPole-v1"
NUM_ENVS = 8
BUFFER_SIZE = 100_000
HIDDEN = (128, 128)

# Targets from the issue that asked for this benchmark (steps/s on the 2-core CPU machine).
TARGET_RANDOM = 50_000
TARGET_NET = 30_000
# The collector's own cost (issue 10, point 5): rlblocks' steps/s over the bare gymnasium loop's,
# both measured in the same run, so that the machine's speed and load cancel out.
TARGET_RATIO = {"random": 0.65, "net": 0.40}

Runner = Callable[[int], int]  # run(n_step) -> number of env steps actually taken


# --------------------------------------------------------------------------------------------
# Contenders. Each factory builds its objects, warms up, and returns run(n_step) -> steps.
# --------------------------------------------------------------------------------------------


def make_bare_loop(seed: int, warmup: int) -> Runner:
    import gymnasium as gym

    env = gym.make(ENV_ID)
    env.reset(seed=seed)
    env.action_space.seed(seed)

    def run(n_step: int) -> int:
        step, reset, sample = env.step, env.reset, env.action_space.sample
        for _ in range(n_step):
            _, _, terminated, truncated, _ = step(sample())
            if terminated or truncated:
                reset()
        return n_step

    run(warmup)
    return run


def make_tianshou(mode: str, seed: int, warmup: int) -> Runner:
    import gymnasium as gym
    import torch
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.net.common import Net

    torch.manual_seed(seed)
    envs = DummyVectorEnv([lambda: gym.make(ENV_ID) for _ in range(NUM_ENVS)])
    envs.seed(seed)
    # Tianshou's own MLP: Linear(4,128) ReLU Linear(128,128) ReLU Linear(128,2), i.e. the same
    # network as rlblocks' default DQN net; the policy takes the argmax of its Q-values.
    net = Net(state_shape=4, action_shape=2, hidden_sizes=list(HIDDEN))
    policy = DiscreteQLearningPolicy(model=net, action_space=envs.action_space[0])
    policy.eval()
    buffer = VectorReplayBuffer(BUFFER_SIZE, buffer_num=NUM_ENVS)
    collector = Collector(policy, envs, buffer)  # exploration_noise=False: greedy argmax
    collector.reset()
    random = mode == "random"

    def run(n_step: int) -> int:
        # Collector.collect runs the policy under torch.no_grad() by default.
        stats = collector.collect(n_step=n_step, random=random)
        return int(stats.n_collected_steps)

    run(warmup)
    return run


def make_rlblocks(mode: str, seed: int, warmup: int) -> tuple[Runner, list[float]]:
    import torch

    import rlblocks

    torch.manual_seed(seed)
    envs = rlblocks.make_vector_env("dummy", ENV_ID, num_envs=NUM_ENVS, seed=seed)
    # the per-env layout: what an 8-env rlblocks run gets by default, and the counterpart of
    # Tianshou's VectorReplayBuffer above
    buffer = rlblocks.make_buffer("vector", size=BUFFER_SIZE, num_envs=NUM_ENVS)
    # The default DQN net is the 128x128 MLP, the same shape as the Tianshou net above.
    policy = rlblocks.make_policy("dqn", envs.observation_space, envs.action_space)
    collector = rlblocks.Collector(policy, envs, buffer)
    random = mode == "random"
    self_reported: list[float] = []  # rlblocks' own steps_per_s, shown next to our timing

    def run(n_step: int) -> int:
        stats = collector.collect(n_step=n_step, random=random)
        self_reported.append(float(stats.steps_per_s))
        return int(stats.n_step)

    run(warmup)
    self_reported.clear()
    return run, self_reported


# --------------------------------------------------------------------------------------------


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed collect calls per contender")
    parser.add_argument(
        "--n-step", type=int, default=16_000, help="env steps per timed call (a multiple of 8)"
    )
    parser.add_argument("--warmup", type=int, default=2_000, help="untimed steps before timing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--frameworks",
        default="rlblocks,tianshou,bare",
        help="comma-separated subset of rlblocks,tianshou,bare",
    )
    parser.add_argument(
        "--modes", default="random,net", help="comma-separated subset of random,net"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads for every contender (0: leave torch's default). A batch of 8 "
        "observations gains nothing from intra-op threads, and on a busy 2-core machine extra "
        "threads only add contention.",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if args.n_step % NUM_ENVS:
        parser.error(f"--n-step must be a multiple of {NUM_ENVS}")

    import torch

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    contenders: dict[str, Runner] = {}
    rl_self: dict[str, list[float]] = {}
    notes: list[str] = []
    for fw in frameworks:
        for mode in modes if fw != "bare" else ["random"]:
            key = f"{fw}/{mode}"
            try:
                if fw == "bare":
                    contenders[key] = make_bare_loop(args.seed, args.warmup)
                elif fw == "tianshou":
                    contenders[key] = make_tianshou(mode, args.seed, args.warmup)
                elif fw == "rlblocks":
                    contenders[key], rl_self[key] = make_rlblocks(mode, args.seed, args.warmup)
                else:
                    parser.error(f"unknown framework {fw!r}")
            except (ImportError, AttributeError) as exc:
                notes.append(f"skipped {key}: {type(exc).__name__}: {exc}")

    rates: dict[str, list[float]] = {k: [] for k in contenders}
    for rep in range(args.repeats):
        # Rotate the order each repeat so no contender always runs first or last.
        keys = list(contenders)
        keys = keys[rep % len(keys) :] + keys[: rep % len(keys)] if keys else keys
        for key in keys:
            t0 = time.perf_counter()
            steps = contenders[key](args.n_step)
            dt = time.perf_counter() - t0
            rates[key].append(steps / dt)

    med = {k: statistics.median(v) for k, v in rates.items() if v}

    print(
        f"\nCollector throughput, {ENV_ID}: {NUM_ENVS} envs in-process, replay buffer "
        f"{BUFFER_SIZE:,}; {args.n_step:,} steps per timed call, median of {args.repeats} "
        f"repeats; torch threads: {torch.get_num_threads()}; python {sys.version.split()[0]}, "
        f"torch {torch.__version__}"
    )
    print(f"{'contender':<20} {'median steps/s':>15} {'min':>10} {'max':>10}")
    for key, vals in rates.items():
        label = "bare gym loop (1 env)" if key.startswith("bare") else key
        print(f"{label:<20} {_fmt_rate(med.get(key)):>15} {min(vals):>10,.0f} {max(vals):>10,.0f}")
    for key, vals in rl_self.items():
        if vals:
            print(f"  ({key}: CollectStats.steps_per_s median {statistics.median(vals):,.0f})")

    print("\nRatios (median steps/s):")
    for mode in modes:
        ours, theirs = med.get(f"rlblocks/{mode}"), med.get(f"tianshou/{mode}")
        print(f"  rlblocks / Tianshou, {mode:<6}: {_ratio(ours, theirs)}")
    bare = med.get("bare/random")
    ratios: dict[str, float] = {}
    for mode in modes:
        ours = med.get(f"rlblocks/{mode}")
        if ours is not None and bare:
            ratios[mode] = ours / bare
        print(f"  rlblocks {mode:<6} / bare gym loop: {_ratio(ours, bare)}")
    print(
        f"\nTargets (rlblocks): random >= {TARGET_RANDOM:,} steps/s, net >= {TARGET_NET:,} steps/s"
    )
    for mode, target in (("random", TARGET_RANDOM), ("net", TARGET_NET)):
        ours = med.get(f"rlblocks/{mode}")
        if mode in modes:
            verdict = "not measured" if ours is None else ("met" if ours >= target else "NOT met")
            print(f"  {mode:<6}: {_fmt_rate(ours)} -> {verdict}")
    print(
        "Targets (collector's own cost, rlblocks / bare gym loop): "
        + ", ".join(f"{mode} >= {TARGET_RATIO[mode]:.2f}x" for mode in ("random", "net"))
    )
    for mode in ("random", "net"):
        if mode in modes:
            ratio = ratios.get(mode)
            verdict = (
                "not measured"
                if ratio is None
                else ("met" if ratio >= TARGET_RATIO[mode] else "NOT met")
            )
            shown = "n/a" if ratio is None else f"{ratio:.2f}x"
            print(f"  {mode:<6}: {shown} (target {TARGET_RATIO[mode]:.2f}x) -> {verdict}")
    for note in notes:
        print(f"note: {note}")

    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "n_step": args.n_step,
                    "repeats": args.repeats,
                    "torch_threads": torch.get_num_threads(),
                    "rates": rates,
                    "median": med,
                    "ratio_to_bare": ratios,
                    "notes": notes,
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
