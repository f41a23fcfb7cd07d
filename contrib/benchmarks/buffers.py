"""Replay buffer speed and memory: rlblocks against Tianshou and Stable-Baselines3, in one run.

Workload (HalfCheetah-sized transitions: obs 17 float32, action 6 float32, 8 envs, capacity 1e5):

* add:    1e5 transitions, one vector step of 8 envs per call (12,500 calls);
* sample: 1e3 batches of 256 from the full buffer;
* per:    prioritized replay, 1e3 x (sample 256 + priority update of those 256).

Each contender is timed ``--repeats`` times with the order rotated; the table shows medians and
the ratios the issue targets. Memory is the bytes allocated by building and filling a buffer
(tracemalloc, in a separate untimed pass). Step batches are built before timing for everyone.
Run from the repository root::

    /work/benchvenv/bin/python contrib/benchmarks/buffers.py            # about 2 minutes
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

OBS, ACT, ENVS, SIZE = 17, 6, 8, 100_000
N_ADD = SIZE // ENVS  # vector steps
N_SAMPLE, BATCH = 1000, 256


def make_steps(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    steps = []
    for t in range(N_ADD):
        steps.append({
            "obs": rng.standard_normal((ENVS, OBS), dtype=np.float32),
            "act": rng.standard_normal((ENVS, ACT), dtype=np.float32),
            "rew": rng.standard_normal(ENVS),
            "terminated": np.zeros(ENVS, bool),
            "truncated": np.full(ENVS, t % 1000 == 999),
            "obs_next": rng.standard_normal((ENVS, OBS), dtype=np.float32),
        })
    return steps


# --- contenders: (build, add_all, sample_all, per_all) per framework --------------------------

class RL:
    """rlblocks buffers by registry name."""

    def __init__(self, name: str, steps: list[dict[str, np.ndarray]]) -> None:
        import rlblocks

        self.name, self.steps, self.make = name, steps, rlblocks.make_buffer
        self.envs = np.arange(ENVS)

    def build(self) -> Any:
        buf = self.make(self.name, size=SIZE, num_envs=ENVS)
        buf.seed(0)
        return buf

    def add_all(self, buf: Any) -> None:
        add, envs = buf.add, self.envs
        for step in self.steps:
            add(step, env_ids=envs)

    def sample_all(self, buf: Any) -> None:
        for _ in range(N_SAMPLE):
            buf.sample(BATCH)

    def per_all(self, buf: Any) -> None:
        rng = np.random.default_rng(0)
        for _ in range(N_SAMPLE):
            _, idx = buf.sample(BATCH)
            buf.update_priority(idx, rng.random(BATCH))


class Tianshou:
    def __init__(self, kind: str, steps: list[dict[str, np.ndarray]]) -> None:
        from tianshou.data import Batch

        self.kind = kind
        self.envs = np.arange(ENVS)
        if kind == "ReplayBuffer":  # one env's buffer: rows added one at a time
            self.batches = [Batch({k: v[e] for k, v in s.items()}) for s in steps
                            for e in range(ENVS)]
        else:
            self.batches = [Batch(s) for s in steps]

    def build(self) -> Any:
        from tianshou.data import PrioritizedVectorReplayBuffer, ReplayBuffer, VectorReplayBuffer

        if self.kind == "ReplayBuffer":
            return ReplayBuffer(SIZE)
        if self.kind == "VectorReplayBuffer":
            return VectorReplayBuffer(SIZE, ENVS)
        return PrioritizedVectorReplayBuffer(SIZE, ENVS, alpha=0.6, beta=0.4)

    def add_all(self, buf: Any) -> None:
        if self.kind == "ReplayBuffer":
            for b in self.batches:
                buf.add(b)
        else:
            envs = self.envs
            for b in self.batches:
                buf.add(b, buffer_ids=envs)

    def sample_all(self, buf: Any) -> None:
        for _ in range(N_SAMPLE):
            buf.sample(BATCH)

    def per_all(self, buf: Any) -> None:
        rng = np.random.default_rng(0)
        for _ in range(N_SAMPLE):
            _, idx = buf.sample(BATCH)
            buf.update_weight(idx, rng.random(BATCH))


class SB3:
    def __init__(self, steps: list[dict[str, np.ndarray]]) -> None:
        self.steps = steps
        self.infos = [{} for _ in range(ENVS)]

    def build(self) -> Any:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        obs = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
        act = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
        return ReplayBuffer(SIZE // ENVS * ENVS, obs, act, device="cpu", n_envs=ENVS)

    def add_all(self, buf: Any) -> None:
        infos = self.infos
        for s in self.steps:
            buf.add(s["obs"], s["obs_next"], s["act"], s["rew"], s["terminated"] | s["truncated"],
                    infos)

    def sample_all(self, buf: Any) -> None:
        for _ in range(N_SAMPLE):
            buf.sample(BATCH)


def timed(fn: Callable[[], None]) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def memory(c: Any) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buf = c.build()
    c.add_all(buf)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del buf
    return after - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument("--json", help="write the raw timings here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    steps = make_steps()
    contenders: dict[str, Any] = {"rlblocks replay": RL("replay", steps),
                                  "rlblocks vector": RL("vector", steps),
                                  "rlblocks prioritized": RL("prioritized", steps)}
    missing = []
    try:
        for kind in ("ReplayBuffer", "VectorReplayBuffer", "PrioritizedVectorReplayBuffer"):
            contenders[f"tianshou {kind}"] = Tianshou(kind, steps)
    except ImportError:
        missing.append("tianshou")
    try:
        import stable_baselines3  # noqa: F401

        contenders["sb3 ReplayBuffer"] = SB3(steps)
    except ImportError:
        missing.append("stable-baselines3")
    per = {"rlblocks prioritized", "tianshou PrioritizedVectorReplayBuffer"}
    times: dict[str, dict[str, list[float]]] = {n: {"add": [], "sample": [], "per": []}
                                                for n in contenders}
    names = list(contenders)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            c = contenders[name]
            buf = c.build()
            times[name]["add"].append(timed(lambda c=c, buf=buf: c.add_all(buf)))
            times[name]["sample"].append(timed(lambda c=c, buf=buf: c.sample_all(buf)))
            if name in per:
                times[name]["per"].append(timed(lambda c=c, buf=buf: c.per_all(buf)))
            del buf
    med = {n: {k: statistics.median(v) if v else float("nan") for k, v in t.items()}
           for n, t in times.items()}
    mem = {} if args.no_memory else {n: memory(c) for n, c in contenders.items()}

    print(f"\n{N_ADD * ENVS} transitions (obs {OBS}, act {ACT} float32) added {ENVS} envs per "
          f"call; {N_SAMPLE} batches of {BATCH}; median of {args.repeats}")
    print(f"{'contender':42s} {'add s':>8s} {'sample s':>9s} {'per s':>8s} {'memory MB':>10s}")
    for n in contenders:
        m = med[n]
        mb = f"{mem[n] / 2**20:10.1f}" if n in mem else f"{'-':>10s}"
        per_s = f"{m['per']:8.3f}" if n in per else f"{'-':>8s}"
        print(f"{n:42s} {m['add']:8.3f} {m['sample']:9.3f} {per_s} {mb}")
    if missing:
        print("skipped (not installed):", ", ".join(missing))

    def ratio(a: str, b: str, key: str) -> str:
        if a not in med or b not in med:
            return "n/a"
        return f"{med[b][key] / med[a][key]:.2f}x"

    vec, ts_vec, sb3 = "rlblocks vector", "tianshou VectorReplayBuffer", "sb3 ReplayBuffer"
    print("\nratios (peer time / rlblocks time; > 1 means rlblocks is faster)")
    print(f"  add    vector vs Tianshou VectorReplayBuffer: {ratio(vec, ts_vec, 'add')} "
          "(target >= 5x)")
    print(f"  add    vector vs SB3 ReplayBuffer:            {ratio(vec, sb3, 'add')} "
          "(target >= 0.67x, i.e. within 1.5x)")
    print(f"  add    replay vs SB3 ReplayBuffer:            {ratio('rlblocks replay', sb3, 'add')}")
    if ts_vec in med and sb3 in med:
        fast = min((ts_vec, sb3, "tianshou ReplayBuffer"), key=lambda n: med[n]["sample"])
        print(f"  sample vector vs faster peer ({fast}): {ratio(vec, fast, 'sample')} "
              "(target >= 2x)")
    pv, tpv = "rlblocks prioritized", "tianshou PrioritizedVectorReplayBuffer"
    print(f"  PER add:            {ratio(pv, tpv, 'add')} (target >= 2x)")
    print(f"  PER sample+update:  {ratio(pv, tpv, 'per')} (target >= 2x)")
    if mem and vec in mem and ts_vec in mem:
        print(f"  memory vector / Tianshou VectorReplayBuffer: {mem[vec] / mem[ts_vec]:.2f}; "
              f"vector / SB3: {mem[vec] / mem[sb3]:.2f}; "
              f"prioritized / Tianshou PER: {mem[pv] / mem[tpv]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"times": times, "median": med, "memory_bytes": mem}, fh, indent=1)


if __name__ == "__main__":
    main()
