"""Replay buffer speed and memory: rlblocks against Tianshou and Stable-Baselines3, in one run.

Main workload (HalfCheetah-sized transitions: obs 17 float32, action 6 float32, 8 envs, capacity
1e5):

* add:    1e5 transitions, one vector step of 8 envs per call (12,500 calls);
* sample: 1e3 batches of 256 from the full buffer;
* per:    prioritized replay, 1e3 x (sample 256 + priority update of those 256).

Goal workload (``--her``, on by default): the same with goal-dict observations (``observation``
17, ``achieved_goal`` 3, ``desired_goal`` 3 float32; 50-step episodes, all envs in lockstep),
sampled with hindsight relabelling (``future`` goals for 4 of 5 transitions, a vectorised
``compute_reward``). Its subject is the buffer composed of every part at once,
``make_buffer("vector", ..., sampler="prioritized", relabel="her", storage="memmap", path=...)``.
No peer has that combination (neither has prioritized hindsight replay or memory-mapped
storage), so it is compared with the closest ones: Tianshou's ``HERVectorReplayBuffer`` and
SB3's ``HerReplayBuffer`` (uniform sampling, in RAM) for add and relabelled sampling, and
Tianshou's ``PrioritizedVectorReplayBuffer`` on the same goal-dict steps (no relabelling) for
prioritized sample+update; rlblocks' uniform + HER and prioritized + HER buffers in RAM are
timed too, to separate what each part costs.

After an untimed warm-up of every contender (a few adds and samples: compiled code loaded),
each contender is timed ``--repeats`` times with the order rotated; the tables show medians and
the ratios the issue targets. Memory is the bytes allocated by building and filling a buffer
(tracemalloc, in a separate untimed pass); memory-mapped storage lives in files (page cache, not
heap), shown apart. Step batches are built before timing for everyone. Buffers that allocate
their storage on the first add (rlblocks, Tianshou) have that in their add time; SB3 allocates in
its constructor, which is not timed. Run from the repository root::

    .venv-bench/bin/python contrib/benchmarks/buffers.py            # about 3 minutes
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

OBS, ACT, ENVS, SIZE = 17, 6, 8, 100_000
N_ADD = SIZE // ENVS  # vector steps
N_SAMPLE, BATCH = 1000, 256
GOAL, HORIZON, HER_K = 3, 50, 4  # goal size, episode length, relabelled per original


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


def make_goal_steps(seed: int = 1) -> list[dict[str, Any]]:
    """Steps with goal-dict observations; every env's episode is truncated after HORIZON."""
    rng = np.random.default_rng(seed)

    def obs() -> dict[str, np.ndarray]:
        return {"observation": rng.standard_normal((ENVS, OBS), dtype=np.float32),
                "achieved_goal": rng.standard_normal((ENVS, GOAL), dtype=np.float32),
                "desired_goal": rng.standard_normal((ENVS, GOAL), dtype=np.float32)}

    steps = []
    for t in range(N_ADD):
        steps.append({
            "obs": obs(),
            "act": rng.standard_normal((ENVS, ACT), dtype=np.float32),
            "rew": rng.standard_normal(ENVS),
            "terminated": np.zeros(ENVS, bool),
            "truncated": np.full(ENVS, t % HORIZON == HORIZON - 1),
            "obs_next": obs(),
        })
    return steps


def goal_reward(achieved: np.ndarray, desired: np.ndarray, info: Any = None) -> np.ndarray:
    """A Fetch-like sparse reward, vectorised over the leading axis: 0 when within 0.05, else -1."""
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.05).astype(np.float32)


# --- contenders: build, add_all, sample_all, per_all (and discard) per framework -----------------

class RL:
    """rlblocks buffers by registry name (and part names / options for make_buffer)."""

    def __init__(self, name: str, steps: list[dict[str, Any]], root: str | None = None,
                 **options: Any) -> None:
        import rlblocks

        self.name, self.steps, self.make = name, steps, rlblocks.make_buffer
        self.options, self.root = options, root
        self.envs = np.arange(ENVS)
        self.dirs: dict[int, str] = {}

    def build(self) -> Any:
        options = dict(self.options)
        if self.root is not None:  # memmap storage: a fresh directory for every buffer
            options.update(storage="memmap", path=tempfile.mkdtemp(dir=self.root))
        buf = self.make(self.name, size=SIZE, num_envs=ENVS, **options)
        if self.root is not None:
            self.dirs[id(buf)] = options["path"]
        buf.seed(0)
        return buf

    def files_bytes(self, buf: Any) -> int:
        """Bytes of the memory-mapped files of ``buf`` (0 in RAM)."""
        path = self.dirs.get(id(buf))
        if path is None:
            return 0
        return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())

    def discard(self, buf: Any) -> None:
        path = self.dirs.pop(id(buf), None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def add_all(self, buf: Any, n: int = N_ADD) -> None:
        add, envs = buf.add, self.envs
        for step in self.steps[:n]:
            add(step, env_ids=envs)

    def sample_all(self, buf: Any, n: int = N_SAMPLE) -> None:
        for _ in range(n):
            buf.sample(BATCH)

    def per_all(self, buf: Any, n: int = N_SAMPLE) -> None:
        rng = np.random.default_rng(0)
        for _ in range(n):
            _, idx = buf.sample(BATCH)
            buf.update_priority(idx, rng.random(BATCH))


class Tianshou:
    def __init__(self, kind: str, steps: list[dict[str, Any]]) -> None:
        from tianshou.data import Batch

        self.kind = kind
        self.envs = np.arange(ENVS)
        if kind == "ReplayBuffer":  # one env's buffer: rows added one at a time
            self.batches = [Batch({k: v[e] for k, v in s.items()}) for s in steps
                            for e in range(ENVS)]
        else:
            self.batches = [Batch(s) for s in steps]

    def build(self) -> Any:
        from tianshou.data import (
            HERVectorReplayBuffer,
            PrioritizedVectorReplayBuffer,
            ReplayBuffer,
            VectorReplayBuffer,
        )

        if self.kind == "ReplayBuffer":
            return ReplayBuffer(SIZE)
        if self.kind == "VectorReplayBuffer":
            return VectorReplayBuffer(SIZE, ENVS)
        if self.kind == "HERVectorReplayBuffer":  # future_k=5: 4 of 5 relabelled, as HER_K=4
            return HERVectorReplayBuffer(SIZE, ENVS, compute_reward_fn=goal_reward,
                                         horizon=HORIZON, future_k=HER_K + 1)
        return PrioritizedVectorReplayBuffer(SIZE, ENVS, alpha=0.6, beta=0.4)

    def discard(self, buf: Any) -> None:
        pass

    def add_all(self, buf: Any, n: int = N_ADD) -> None:
        if self.kind == "ReplayBuffer":
            for b in self.batches[: n * ENVS]:
                buf.add(b)
        else:
            envs = self.envs
            for b in self.batches[:n]:
                buf.add(b, buffer_ids=envs)

    def sample_all(self, buf: Any, n: int = N_SAMPLE) -> None:
        for _ in range(n):
            buf.sample(BATCH)

    def per_all(self, buf: Any, n: int = N_SAMPLE) -> None:
        rng = np.random.default_rng(0)
        for _ in range(n):
            _, idx = buf.sample(BATCH)
            buf.update_weight(idx, rng.random(BATCH))


class SB3:
    """SB3's ``ReplayBuffer``, or with ``her`` its ``HerReplayBuffer`` over goal-dict steps
    (which computes rewards through a VecEnv of goal envs)."""

    def __init__(self, steps: list[dict[str, Any]], her: bool = False) -> None:
        self.steps, self.her = steps, her
        self.infos = [{} for _ in range(ENVS)]

    def build(self) -> Any:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        obs = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
        act = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
        if not self.her:
            return ReplayBuffer(SIZE // ENVS * ENVS, obs, act, device="cpu", n_envs=ENVS)
        from stable_baselines3 import HerReplayBuffer
        from stable_baselines3.common.vec_env import DummyVecEnv

        venv = DummyVecEnv([_goal_env_class() for _ in range(ENVS)])
        return HerReplayBuffer(SIZE // ENVS * ENVS, venv.observation_space, venv.action_space,
                               env=venv, device="cpu", n_envs=ENVS, n_sampled_goal=HER_K,
                               goal_selection_strategy="future")

    def discard(self, buf: Any) -> None:
        pass

    def add_all(self, buf: Any, n: int = N_ADD) -> None:
        infos = self.infos
        for s in self.steps[:n]:
            buf.add(s["obs"], s["obs_next"], s["act"], s["rew"], s["terminated"] | s["truncated"],
                    infos)

    def sample_all(self, buf: Any, n: int = N_SAMPLE) -> None:
        for _ in range(n):
            buf.sample(BATCH)


def _goal_env_class() -> type:
    """A gymnasium env with the goal workload's spaces and ``compute_reward`` (SB3's HER buffer
    reads the spaces and calls ``compute_reward`` through its VecEnv)."""
    import gymnasium as gym

    def box(n: int) -> gym.spaces.Box:
        return gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)

    class GoalEnv(gym.Env):
        observation_space = gym.spaces.Dict(
            {"observation": box(OBS), "achieved_goal": box(GOAL), "desired_goal": box(GOAL)}
        )
        action_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)

        def compute_reward(self, achieved: Any, desired: Any, info: Any) -> np.ndarray:
            return goal_reward(achieved, desired)

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
            return self.observation_space.sample(), {}

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            return self.observation_space.sample(), 0.0, False, False, {}

    return GoalEnv


# --- timing -------------------------------------------------------------------------------------

def timed(fn: Callable[[], None]) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def memory(c: Any) -> tuple[int, int]:
    """(heap bytes allocated by building and filling a buffer, bytes of its mapped files)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buf = c.build()
    c.add_all(buf)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    files = c.files_bytes(buf) if isinstance(c, RL) else 0
    c.discard(buf)
    del buf
    return after - before, files


def run(contenders: dict[str, Any], per: set[str], repeats: int,
        ) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, float]]]:
    """Time add, sample (and per for ``per``) of every contender ``repeats`` times, rotating
    the order; return the raw times and their medians."""
    times = {n: {"add": [], "sample": [], "per": []} for n in contenders}
    names = list(contenders)
    for name in names:  # untimed warm-up: compiled (numba) code is loaded, lazy imports done
        c = contenders[name]
        buf = c.build()
        c.add_all(buf, 2 * HORIZON)
        c.sample_all(buf, 3)
        if name in per:
            c.per_all(buf, 3)
        c.discard(buf)
        del buf
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            c = contenders[name]
            buf = c.build()
            times[name]["add"].append(timed(lambda c=c, buf=buf: c.add_all(buf)))
            times[name]["sample"].append(timed(lambda c=c, buf=buf: c.sample_all(buf)))
            if name in per:
                times[name]["per"].append(timed(lambda c=c, buf=buf: c.per_all(buf)))
            c.discard(buf)
            del buf
    med = {n: {k: statistics.median(v) if v else float("nan") for k, v in t.items()}
           for n, t in times.items()}
    return times, med


def table(contenders: dict[str, Any], per: set[str], med: dict[str, dict[str, float]],
          mem: dict[str, tuple[int, int]]) -> None:
    print(f"{'contender':48s} {'add s':>8s} {'sample s':>9s} {'per s':>8s} {'memory MB':>10s}")
    for n in contenders:
        m = med[n]
        if n in mem:
            heap, files = mem[n]
            mb = f"{heap / 2**20:10.1f}" + (f" (+{files / 2**20:.1f} MB files)" if files else "")
        else:
            mb = f"{'-':>10s}"
        per_s = f"{m['per']:8.3f}" if n in per else f"{'-':>8s}"
        print(f"{n:48s} {m['add']:8.3f} {m['sample']:9.3f} {per_s} {mb}")


def ratio(med: dict[str, dict[str, float]], a: str, b: str, key: str) -> str:
    """Peer ``b``'s time over rlblocks ``a``'s (> 1: rlblocks is faster)."""
    if a not in med or b not in med:
        return "n/a"
    return f"{med[b][key] / med[a][key]:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument("--no-her", dest="her", action="store_false",
                    help="skip the goal workload (prioritized + HER on memmap storage)")
    ap.add_argument("--memmap-dir", default=None,
                    help="where the memmap buffers' files go (default: the system temp dir)")
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
    times, med = run(contenders, per, args.repeats)
    mem = {} if args.no_memory else {n: memory(c) for n, c in contenders.items()}

    print(f"\n{N_ADD * ENVS} transitions (obs {OBS}, act {ACT} float32) added {ENVS} envs per "
          f"call; {N_SAMPLE} batches of {BATCH}; median of {args.repeats}")
    table(contenders, per, med, mem)
    if missing:
        print("skipped (not installed):", ", ".join(missing))

    vec, ts_vec, sb3 = "rlblocks vector", "tianshou VectorReplayBuffer", "sb3 ReplayBuffer"
    print("\nratios (peer time / rlblocks time; > 1 means rlblocks is faster)")
    print(f"  add    vector vs Tianshou VectorReplayBuffer: {ratio(med, vec, ts_vec, 'add')} "
          "(target >= 5x)")
    print(f"  add    vector vs SB3 ReplayBuffer:            {ratio(med, vec, sb3, 'add')} "
          "(target >= 0.67x, i.e. within 1.5x)")
    print(f"  add    replay vs SB3 ReplayBuffer:            "
          f"{ratio(med, 'rlblocks replay', sb3, 'add')}")
    if ts_vec in med and sb3 in med:
        fast = min((ts_vec, sb3, "tianshou ReplayBuffer"), key=lambda n: med[n]["sample"])
        print(f"  sample vector vs faster peer ({fast}): {ratio(med, vec, fast, 'sample')} "
              "(target >= 2x)")
    pv, tpv = "rlblocks prioritized", "tianshou PrioritizedVectorReplayBuffer"
    print(f"  PER add:            {ratio(med, pv, tpv, 'add')} (target >= 2x)")
    print(f"  PER sample+update:  {ratio(med, pv, tpv, 'per')} (target >= 2x)")
    if mem and vec in mem and ts_vec in mem and sb3 in mem and tpv in mem:
        print(f"  memory vector / Tianshou VectorReplayBuffer: "
              f"{mem[vec][0] / mem[ts_vec][0]:.2f}; vector / SB3: {mem[vec][0] / mem[sb3][0]:.2f}; "
              f"prioritized / Tianshou PER: {mem[pv][0] / mem[tpv][0]:.2f} (target <= 1)")

    out: dict[str, Any] = {"times": times, "median": med, "memory_bytes": mem}
    if args.her:
        out["her"] = goal_section(args, missing)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


def goal_section(args: argparse.Namespace, missing: list[str]) -> dict[str, Any]:
    """The goal workload: prioritized + HER on memmap storage against the closest peers."""
    steps = make_goal_steps()
    her = {"relabel": "her", "k": HER_K, "compute_reward": f"{__name__}:goal_reward"}
    prio = {"sampler": "prioritized", "alpha": 0.6, "beta": 0.4}
    root = tempfile.mkdtemp(prefix="rlblocks-bench-", dir=args.memmap_dir)
    subject = "rlblocks vector+prioritized+her, memmap"
    contenders: dict[str, Any] = {
        subject: RL("vector", steps, root=root, **prio, **her),
        "rlblocks vector+prioritized+her, memory": RL("vector", steps, **prio, **her),
        "rlblocks vector+her, memory": RL("vector", steps, **her),
    }
    if "tianshou" not in missing:
        contenders["tianshou HERVectorReplayBuffer"] = Tianshou("HERVectorReplayBuffer", steps)
        contenders["tianshou PrioritizedVectorReplayBuffer"] = Tianshou(
            "PrioritizedVectorReplayBuffer", steps)
    if "stable-baselines3" not in missing:
        contenders["sb3 HerReplayBuffer"] = SB3(steps, her=True)
    per = {subject, "rlblocks vector+prioritized+her, memory",
           "tianshou PrioritizedVectorReplayBuffer"}
    try:
        times, med = run(contenders, per, args.repeats)
        mem = {} if args.no_memory else {n: memory(c) for n, c in contenders.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\ngoal-dict observations (observation {OBS}, achieved/desired goal {GOAL} float32), "
          f"{HORIZON}-step episodes; sampling relabels {HER_K} of {HER_K + 1} transitions with "
          f"future goals (except Tianshou PER); memmap files under {os.path.dirname(root)}")
    table(contenders, per, med, mem)
    ts_her, ts_per, sb3_her = ("tianshou HERVectorReplayBuffer",
                               "tianshou PrioritizedVectorReplayBuffer", "sb3 HerReplayBuffer")
    print("\nratios (peer time / rlblocks time). No peer has prioritized hindsight replay or "
          "memory-mapped\nstorage; the closest: HER buffers in RAM with uniform sampling (add, "
          "relabelled sample), and\nTianshou PER on the same steps without relabelling "
          "(sample+update)")
    for a in (subject, "rlblocks vector+her, memory"):
        print(f"  {a}:")
        print(f"    add    vs Tianshou HERVectorReplayBuffer: {ratio(med, a, ts_her, 'add')}; "
              f"vs SB3 HerReplayBuffer: {ratio(med, a, sb3_her, 'add')}")
        print(f"    sample vs Tianshou HERVectorReplayBuffer: {ratio(med, a, ts_her, 'sample')}; "
              f"vs SB3 HerReplayBuffer: {ratio(med, a, sb3_her, 'sample')}")
        if a == subject:
            print(f"    vs Tianshou PrioritizedVectorReplayBuffer: add "
                  f"{ratio(med, a, ts_per, 'add')}; sample(+relabel)+update "
                  f"{ratio(med, a, ts_per, 'per')}")
    if mem and all(n in mem for n in (subject, ts_her, sb3_her)):
        heap, files = mem[subject]
        print(f"  memory: {subject} {heap / 2**20:.1f} MB heap + {files / 2**20:.1f} MB mapped "
              f"files; Tianshou HER {mem[ts_her][0] / 2**20:.1f} MB, SB3 HER "
              f"{mem[sb3_her][0] / 2**20:.1f} MB (all in RAM)")
    return {"times": times, "median": med, "memory_bytes": mem}


if __name__ == "__main__":
    main()
