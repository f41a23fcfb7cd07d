#!/usr/bin/env python
"""A D4RL-style offline benchmark made here: rlblocks against Tianshou and d3rlpy on datasets
that rlblocks' own SAC runs recorded, in Minari format.

The work goes in two stages, each resumable, so that it can be done in pieces:

(a) Datasets, per env (``--envs``, default Hopper-v5,HalfCheetah-v5). One rlblocks SAC run
    (``rlblocks.train("sac", env=ENV, seed=--sac-seed)`` with SAC's MuJoCo preset: 256-256
    networks, 10k random warm-up steps, one gradient step per env step, Adam 1e-3, fixed
    temperature 0.2) trains for ``--sac-steps`` env steps (default 30,000: a small budget, so the
    "expert" is a small-budget expert, far below a D4RL expert) in stages of ``--sac-stage``
    env steps (default 2,500); each stage ends on a test of 10 episodes and a copy of the run
    directory is kept (``snap-STEP``, with that point's checkpoint and replay buffer). Then:

    * ``expert``: ``rlblocks collect SNAP --which latest --episodes --dataset-episodes`` from the
      last stage (the run's final policy, its deterministic test actions);
    * ``medium``: the same from the stage, after the warm-up (a policy that has learned), whose
      test return is nearest a third of the final stage's;
    * ``medium-replay``: ``rlblocks collect SNAP --mode replay`` of that medium stage: the run's
      replay buffer up to the medium point (random warm-up included, as D4RL's is).

    Each is a Minari dataset (``--work-dir``/ENV/NAME). The random return for normalisation is
    the mean return of ``--test-episodes`` episodes of uniformly random actions on the env; the
    expert return is the mean return of the expert dataset's episodes. What was made is written
    to ``--out-dir``/datasets.json.

(b) Trials: library x algorithm x env x dataset x seed (``--libraries``, ``--algos``,
    ``--datasets``, ``--seeds``), one at a time, each in a fresh subprocess with
    ``torch.set_num_threads(1)``. Every trial takes the same ``--gradient-steps`` (default 5,000)
    gradient steps; its score is the mean return of ``--test-episodes`` (default 10) episodes of
    the final policy acting deterministically, episode k from env seed 10,000 + k (the same
    starts for every trial), normalised: 100 * (score - random) / (expert - random). Its wall
    clock is the seconds of training: the gradient steps with their batch sampling (rlblocks:
    its offline trainer's ``wall_seconds`` less the seconds of its one in-training test, which
    plays a single episode; the peers: the loop of update calls), not loading data nor the final
    evaluation. Each library reads the same Minari dataset, with ``minari.MinariDataset`` for the
    peers, converted to Tianshou's ``ReplayBuffer`` and d3rlpy's ``MDPDataset``.

    Each library with its own defaults, nothing tuned here:

    * rlblocks: ``rlblocks.train(ALGO, env=ENV, dataset=DATASET, max_gradient_steps=N)`` with
      each algorithm's own defaults (its plugin's ``_spec.py`` and config). One departure: CQL's
      behaviour-cloning warm start (``bc_steps``, 40,000 of a 1M-step run, the CQL authors'
      ``policy_eval_start``) is scaled to the same fraction of the budget (200 of 5,000), since
      at its full length it would take the whole budget.
    * Tianshou 2.0.1 (BC, BCQ, CQL, TD3+BC): the settings of its ``examples/offline/d4rl_il.py``,
      ``d4rl_bcq.py``, ``d4rl_cql.py`` and ``d4rl_td3_bc.py`` (networks 256-256, BCQ's VAE
      512-512, CQL with its Lagrange threshold 10, batch 256), as
      ``offline_speed.py``'s ``default`` sizes build them (that code is reused). The examples'
      optional observation normalisation is not applied.
    * d3rlpy 2.8.1 (BC, BCQ, CQL, TD3+BC, IQL, CRR, AWAC): each config class with its defaults
      (``d3rlpy.algos.BCConfig()`` ...), updated with ``update(sample_transition_batch(batch))``
      as its ``fit`` does; no observation or reward scaler (its reproduction scripts add some
      per algorithm).

Output in ``--out-dir`` (default docs/benchmarks/offline-d4rl): ``results.jsonl`` (one line per
finished trial; a rerun skips the trials there), ``datasets.json``, ``README.md`` (the table:
per cell the trials, normalised score mean ± std, median wall seconds, and whether rlblocks met
the targets: a score at least the better peer's and a wall clock at most half the faster
peer's) and ``plots/`` (matplotlib). ``--report-only`` redraws the table and plots.

Run (from the repository root, in .venv-bench, see README.md)::

    python contrib/benchmarks/offline_d4rl.py --envs Hopper-v5 --datasets medium --seeds 1 \\
        --work-dir ~/offline-d4rl-data
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _trials import gist, run_json_trial

HERE = Path(__file__).resolve().parent
ENVS = ("Hopper-v5", "HalfCheetah-v5")
DATASETS = ("medium", "medium-replay", "expert")
LIBRARIES = ("rlblocks", "tianshou", "d3rlpy")
ALGOS = ("bc", "bcq", "cql", "td3bc", "iql", "crr", "awac")
HAS = {
    "rlblocks": set(ALGOS),
    "tianshou": {"bc", "bcq", "cql", "td3bc"},
    "d3rlpy": set(ALGOS),
}
LABEL = {"rlblocks": "rlblocks", "tianshou": "Tianshou", "d3rlpy": "d3rlpy"}
EVAL_SEED = 10_000
#: CQL's warm start as a fraction of its budget: 40,000 of 1,000,000 gradient steps
CQL_BC_FRACTION = 0.04


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- stage (a): datasets ---------------------------------------------------------------------------
def _evaluate(env_id: str, act: Any, episodes: int) -> list[float]:
    """Returns of ``episodes`` episodes of ``act(obs) -> action``, episode k from seed
    ``EVAL_SEED + k``."""
    import gymnasium as gym
    import numpy as np

    env = gym.make(env_id)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=EVAL_SEED + k)
            total, done = 0.0, False
            while not done:
                action = np.asarray(act(obs), dtype=np.float32).reshape(env.action_space.shape)
                obs, rew, term, trunc, _ = env.step(action)
                total += float(rew)
                done = bool(term or trunc)
            returns.append(total)
    finally:
        env.close()
    return returns


def random_return(env_id: str, episodes: int) -> float:
    """Mean return of uniformly random actions (the 0 of the normalised score)."""
    import gymnasium as gym

    space = gym.make(env_id).action_space
    space.seed(EVAL_SEED)
    return statistics.fmean(_evaluate(env_id, lambda _obs: space.sample(), episodes))


def _sac_overrides(args: argparse.Namespace) -> list[str]:
    return [f"trainer.test_interval={args.sac_stage}",
            f"trainer.checkpoint_interval={args.sac_stage}", *args.sac_set]  # fmt: skip


def sac_warmup(env_id: str, args: argparse.Namespace) -> int:
    """The SAC run's random warm-up steps (its MuJoCo preset's, or --sac-set's)."""
    import rlblocks

    config = rlblocks.resolve_train_config("sac", env=env_id, overrides=_sac_overrides(args))
    return int(config.trainer.warmup_steps)


def stage_targets(warmup: int, args: argparse.Namespace) -> list[int]:
    """The env steps at which the SAC run stops for a copy: every ``--sac-stage`` steps after
    the warm-up (a policy before it has not learned), then ``--sac-steps``."""
    first = (warmup // args.sac_stage + 1) * args.sac_stage
    targets = list(range(first, args.sac_steps, args.sac_stage))
    return [*targets, args.sac_steps]


def _sac_stages(env_id: str, work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The staged SAC run: a copy of its run directory at every stage target, with the test
    return that ended the stage. Finished stages are reused."""
    import torch

    import rlblocks

    torch.set_num_threads(1)
    run = work / "sac" / "run"
    stages = []
    for target in stage_targets(sac_warmup(env_id, args), args):
        snap = work / "sac" / f"snap-{target:07d}"
        if not (snap / "result.json").is_file():
            _log(f"{env_id}: SAC to {target} env steps")
            if (run / "checkpoints").is_dir() and (run / "config.json").is_file():
                result = rlblocks.resume(run, overrides=[f"trainer.max_env_steps={target}"])
            else:
                if run.exists():
                    shutil.rmtree(run)  # began, died before its first checkpoint
                result = rlblocks.train(
                    "sac",
                    env=env_id,
                    seed=args.sac_seed,
                    run_dir=run,
                    max_env_steps=target,
                    loggers=[],
                    progress=False,
                    quiet=True,
                    stop_reward=1e12,
                    overrides=_sac_overrides(args),
                )
            if result.env_steps < target:  # interrupted: no copy of a stage cut short
                raise SystemExit(
                    f"{env_id}: the SAC run stopped at {result.env_steps} env steps of "
                    f"{target} ({result.stop_reason}); run the script again to continue it"
                )
            tmp = snap.with_name(snap.name + ".tmp")
            if tmp.exists():
                shutil.rmtree(tmp)
            shutil.copytree(run, tmp)
            tmp.rename(snap)
        result = json.loads((snap / "result.json").read_text())
        stages.append({"env_steps": target, "test_return": float(result["last_test_return"]),
                       "path": str(snap)})  # fmt: skip
        _log(f"{env_id}: SAC at {target}: test return {stages[-1]['test_return']:.1f}")
    return stages


def _collect(snap: str, out: Path, args: argparse.Namespace, replay: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rlblocks", "collect", snap, "--which", "latest",
           "--out", str(out), "--format", "minari", "--seed", "0", "--overwrite"]  # fmt: skip
    cmd += ["--mode", "replay"] if replay else ["--episodes", str(args.dataset_episodes)]
    _log("$ " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    meta = json.loads((out / "data" / "metadata.json").read_text())
    record = meta.get("rlblocks", meta.get("rlblocks_metadata", {}))
    if isinstance(record, str):
        record = json.loads(record)
    return {"path": str(out), "command": "rlblocks " + " ".join(cmd[3:]),
            "episodes": int(meta.get("total_episodes", 0)),
            "steps": int(meta.get("total_steps", 0)),
            "return_mean": (record.get("returns") or {}).get("mean")}  # fmt: skip


def make_datasets(env_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """Stage (a) for one env; its record in datasets.json (made once, then reused)."""
    info_file = Path(args.out_dir) / "datasets.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    entry = info.get(env_id)
    if entry and all(Path(d["path"], "data").is_dir() for d in entry["datasets"].values()):
        return entry
    work = Path(args.work_dir).expanduser().absolute() / env_id
    if len(stage_targets(sac_warmup(env_id, args), args)) < 2:
        raise SystemExit(
            f"--sac-steps {args.sac_steps} leaves fewer than two stages of --sac-stage "
            f"{args.sac_stage} after SAC's warm-up of {sac_warmup(env_id, args)} steps (a medium "
            "and an expert point are needed); raise --sac-steps or lower --sac-stage"
        )
    stages = _sac_stages(env_id, work, args)
    warmup = sac_warmup(env_id, args)
    expert = stages[-1]
    medium = min(stages[:-1], key=lambda s: abs(s["test_return"] - expert["test_return"] / 3))
    short = env_id.split("-")[0].lower()
    datasets = {
        "expert": _collect(expert["path"], work / f"{short}-expert-v0", args, replay=False),
        "medium": _collect(medium["path"], work / f"{short}-medium-v0", args, replay=False),
        "medium-replay": _collect(
            medium["path"], work / f"{short}-medium-replay-v0", args, replay=True
        ),
    }
    entry = {
        "sac": {"env_steps": args.sac_steps, "stage": args.sac_stage, "seed": args.sac_seed,
                "warmup_steps": warmup, "overrides": args.sac_set,
                "stages": [{k: s[k] for k in ("env_steps", "test_return")} for s in stages],
                "medium_env_steps": medium["env_steps"]},
        "random_return": random_return(env_id, args.test_episodes),
        "expert_return": datasets["expert"]["return_mean"],
        "datasets": datasets,
    }  # fmt: skip
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    info[env_id] = entry
    _write_atomic(info_file, json.dumps(info, indent=1) + "\n")
    _log(f"{env_id}: random {entry['random_return']:.1f}, expert {entry['expert_return']:.1f}, "
         f"medium from step {medium['env_steps']}")  # fmt: skip
    return entry


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- stage (b): one trial (in its own process) ------------------------------------------------
def read_minari_arrays(path: str) -> dict[str, Any]:
    """The transitions of a Minari dataset as flat arrays, read with minari itself."""
    import minari
    import numpy as np

    data = minari.MinariDataset(os.path.join(path, "data"))
    keys = ("obs", "act", "rew", "terminated", "truncated", "obs_next")
    parts: dict[str, list[Any]] = {k: [] for k in keys}
    for ep in data.iterate_episodes():
        n = len(ep.rewards)
        if n == 0:
            continue
        trunc = np.asarray(ep.truncations, dtype=bool).copy()
        term = np.asarray(ep.terminations, dtype=bool)
        if not (term[-1] or trunc[-1]):
            trunc[-1] = True
        parts["obs"].append(ep.observations[:-1])
        parts["obs_next"].append(ep.observations[1:])
        parts["act"].append(ep.actions)
        parts["rew"].append(ep.rewards)
        parts["terminated"].append(term)
        parts["truncated"].append(trunc)
    out = {k: np.concatenate(v) for k, v in parts.items()}
    for k in ("obs", "obs_next", "act", "rew"):
        out[k] = out[k].astype(np.float32)
    return out


def _trial_rlblocks(spec: dict[str, Any]) -> tuple[Any, float]:
    import rlblocks

    steps = spec["gradient_steps"]
    overrides = [f"trainer.test_interval={steps}", "trainer.test_episodes=1",
                 f"trainer.checkpoint_interval={steps}"]  # fmt: skip
    if spec["algo"] == "cql":
        overrides.append(f"algo.bc_steps={round(CQL_BC_FRACTION * steps)}")
    with tempfile.TemporaryDirectory(prefix="rlblocks-d4rl-") as tmp:
        result = rlblocks.train(
            spec["algo"], env=spec["env"], dataset=spec["dataset"], seed=spec["seed"],
            max_gradient_steps=steps, loggers=[], progress=False, quiet=True,
            run_dir=f"{tmp}/run", overrides=overrides, stop_reward=1e12,
        )  # fmt: skip
    agent = result.agent
    return (lambda obs: agent.act(obs)), float(result.wall_seconds - result.test_seconds)


def _trial_tianshou(spec: dict[str, Any]) -> tuple[Any, float]:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import offline_speed

    data = read_minari_arrays(spec["dataset"])
    offline_speed.OBS_DIM = data["obs"].shape[1]
    offline_speed.ACT_DIM = data["act"].shape[1]
    algo = spec["algo"]
    step, _ = offline_speed._tianshou(
        algo, False, data, offline_speed.DEFAULT_BATCH["tianshou"][algo]
    )
    t0 = time.perf_counter()
    for _ in range(spec["gradient_steps"]):
        step()
    seconds = time.perf_counter() - t0
    policy = step.learner.policy
    policy.eval()

    def act(obs: Any) -> Any:
        with torch.no_grad():
            return np.asarray(policy.compute_action(np.asarray(obs, dtype=np.float32)))

    return act, seconds


def _trial_d3rlpy(spec: dict[str, Any]) -> tuple[Any, float]:
    import d3rlpy
    import numpy as np

    data = read_minari_arrays(spec["dataset"])
    d3rlpy.seed(spec["seed"])
    cls = {
        "bc": d3rlpy.algos.BCConfig, "bcq": d3rlpy.algos.BCQConfig,
        "cql": d3rlpy.algos.CQLConfig, "td3bc": d3rlpy.algos.TD3PlusBCConfig,
        "iql": d3rlpy.algos.IQLConfig, "crr": d3rlpy.algos.CRRConfig,
        "awac": d3rlpy.algos.AWACConfig,
    }[spec["algo"]]  # fmt: skip
    learner = cls().create(device="cpu:0")
    learner.create_impl((data["obs"].shape[1],), data["act"].shape[1])
    dataset = d3rlpy.dataset.MDPDataset(
        observations=data["obs"], actions=data["act"], rewards=data["rew"].reshape(-1, 1),
        terminals=data["terminated"].astype("float32"),
        timeouts=data["truncated"].astype("float32"),
    )  # fmt: skip
    batch = learner.config.batch_size
    t0 = time.perf_counter()
    for _ in range(spec["gradient_steps"]):
        learner.update(dataset.sample_transition_batch(batch))
    seconds = time.perf_counter() - t0
    return (lambda obs: learner.predict(np.asarray(obs, dtype=np.float32)[None])[0]), seconds


def trial(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one library's algorithm on one dataset for the budget, then evaluate it."""
    import random
    import warnings

    import numpy as np
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    random.seed(spec["seed"])
    np.random.seed(spec["seed"])
    torch.manual_seed(spec["seed"])
    run = {"rlblocks": _trial_rlblocks, "tianshou": _trial_tianshou, "d3rlpy": _trial_d3rlpy}
    act, seconds = run[spec["library"]](spec)
    returns = _evaluate(spec["env"], act, spec["test_episodes"])
    return {"returns": returns, "score": statistics.fmean(returns), "seconds": seconds,
            "version": _version(spec["library"])}  # fmt: skip


def _version(library: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(library)
    except PackageNotFoundError:
        return "unknown"


# -- the driver ----------------------------------------------------------------------------------
def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["env"], r["dataset_name"], r["library"], r["algo"], r["seed"], r["gradient_steps"])


def load_results(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def available(library: str) -> bool:
    """Whether ``library`` can be imported here (the peers are optional)."""
    if library == "rlblocks":
        return True
    import importlib.util

    return importlib.util.find_spec(library) is not None


def run_trials(args: argparse.Namespace, entries: dict[str, dict[str, Any]]) -> None:
    """Every missing trial, seed-major within each env and dataset, one at a time."""
    results_file = Path(args.out_dir) / "results.jsonl"
    done = {_key(r) for r in load_results(results_file) if not r.get("error")}
    libraries = [lib for lib in args.libraries if available(lib)]
    for lib in set(args.libraries) - set(libraries):
        _log(f"{lib} is not installed: its trials are left out")
    for env_id in args.envs:
        entry = entries[env_id]
        for name in args.datasets:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for algo in args.algos:
                    for lib in libraries:
                        if algo not in HAS[lib]:
                            continue
                        base = {"env": env_id, "dataset_name": name, "library": lib,
                                "algo": algo, "seed": seed,
                                "gradient_steps": args.gradient_steps,
                                "test_episodes": args.test_episodes}  # fmt: skip
                        if _key(base) in done:
                            continue
                        spec = {**base, "dataset": entry["datasets"][name]["path"]}
                        cmd = [sys.executable, __file__, "--_trial", json.dumps(spec)]
                        t0 = time.perf_counter()
                        r = run_json_trial(cmd, base, timeout=args.trial_timeout)
                        r["process_seconds"] = time.perf_counter() - t0
                        r["date"] = time.strftime("%Y-%m-%d")
                        with results_file.open("a") as fh:
                            fh.write(json.dumps(r) + "\n")
                        if r.get("error"):
                            _log(f"{_key(base)}: FAILED {gist(r['error'])}")
                        else:
                            _log(f"{_key(base)}: return {r['score']:.1f}, "
                                 f"{r['seconds']:.1f} s")  # fmt: skip


# -- the report ----------------------------------------------------------------------------------
def _envs(entries: dict[str, Any]) -> list[str]:
    """The envs with datasets, the benchmark's own first."""
    return [e for e in ENVS if e in entries] + sorted(set(entries) - set(ENVS))


def normalised(score: float, entry: dict[str, Any]) -> float:
    lo, hi = entry["random_return"], entry["expert_return"]
    return 100.0 * (score - lo) / (hi - lo)


def cells(
    results: list[dict[str, Any]], entries: dict[str, dict[str, Any]]
) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Per (env, dataset, algo, library): normalised scores and training seconds."""
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in results:
        if r.get("error") or r["env"] not in entries:
            continue
        c = out.setdefault((r["env"], r["dataset_name"], r["algo"], r["library"]),
                           {"scores": [], "seconds": [], "steps": set()})  # fmt: skip
        c["scores"].append(normalised(r["score"], entries[r["env"]]))
        c["seconds"].append(r["seconds"])
        c["steps"].add(r["gradient_steps"])
    for c in out.values():
        c["mean"] = statistics.fmean(c["scores"])
        c["std"] = statistics.pstdev(c["scores"]) if len(c["scores"]) > 1 else 0.0
        c["wall"] = statistics.median(c["seconds"])
    return out


def _score_cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "-"
    return f"{c['mean']:.1f} ± {c['std']:.1f} ({len(c['scores'])})"


def table(results: list[dict[str, Any]], entries: dict[str, dict[str, Any]]) -> list[str]:
    """The markdown table rows, one per env, dataset and algorithm that has a trial."""
    cs = cells(results, entries)
    rows = [
        "| env | dataset | algorithm | rlblocks | Tianshou | d3rlpy | wall s rlblocks | "
        "wall s Tianshou | wall s d3rlpy | score target | wall target |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for env_id in _envs(entries):
        for name in DATASETS:
            for algo in ALGOS:
                got = {lib: cs.get((env_id, name, algo, lib)) for lib in LIBRARIES}
                if not any(got.values()):
                    continue
                own = got["rlblocks"]
                peers = [got[lib] for lib in ("tianshou", "d3rlpy") if got[lib]]
                score_t = wall_t = "-"
                if own and peers:
                    best = max(p["mean"] for p in peers)
                    fastest = min(p["wall"] for p in peers)
                    score_t = "met" if own["mean"] >= best else f"missed ({best:.1f})"
                    wall_t = "met" if own["wall"] <= fastest / 2 else (
                        f"missed ({own['wall'] / fastest:.2f}x)")  # fmt: skip
                walls = [f"{got[lib]['wall']:.1f}" if got[lib] else "-" for lib in LIBRARIES]
                scores = [_score_cell(got[lib]) for lib in LIBRARIES]
                rows.append(f"| {env_id} | {name} | {algo} | " + " | ".join(scores) + " | "
                            + " | ".join(walls) + f" | {score_t} | {wall_t} |")  # fmt: skip
    return rows


def plots(
    results: list[dict[str, Any]], entries: dict[str, dict[str, Any]], out: Path
) -> list[str]:
    """One figure per env and dataset with trials: normalised score and wall seconds per
    algorithm and library. Returns the files written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    cs = cells(results, entries)
    written = []
    for env_id in _envs(entries):
        for name in DATASETS:
            algos = [a for a in ALGOS if any((env_id, name, a, lib) in cs for lib in LIBRARIES)]
            if not algos:
                continue
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
            width = 0.8 / len(LIBRARIES)
            for i, lib in enumerate(LIBRARIES):
                xs = [j + (i - 1) * width for j in range(len(algos))]
                got = [cs.get((env_id, name, a, lib)) for a in algos]
                axes[0].bar(xs, [c["mean"] if c else 0 for c in got], width,
                            yerr=[c["std"] if c else 0 for c in got], label=LABEL[lib])  # fmt: skip
                axes[1].bar(xs, [c["wall"] if c else 0 for c in got], width, label=LABEL[lib])
            titles = ("normalised score (random 0, expert 100)", "training wall seconds (median)")
            for ax, title in zip(axes, titles, strict=True):
                ax.set_xticks(range(len(algos)), algos)
                ax.set_title(title, fontsize=10)
            axes[0].axhline(0, color="grey", lw=0.5)
            axes[0].legend(fontsize=8)
            fig.suptitle(f"{env_id} {name}")
            fig.tight_layout()
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"{env_id}-{name}.png"
            fig.savefig(path, dpi=90)
            plt.close(fig)
            written.append(path.name)
    return written


def datasets_table(entries: dict[str, dict[str, Any]]) -> list[str]:
    """What stage (a) made: per env, the SAC stages and each dataset's size and return."""
    rows = ["| env | dataset | SAC env steps | episodes | transitions | mean return |",
            "| --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for env_id in _envs(entries):
        e = entries[env_id]
        at = {"expert": e["sac"]["env_steps"], "medium": e["sac"]["medium_env_steps"],
              "medium-replay": f"0-{e['sac']['medium_env_steps']}"}  # fmt: skip
        for name in DATASETS:
            d = e["datasets"][name]
            ret = "-" if d["return_mean"] is None else f"{d['return_mean']:.1f}"
            rows.append(f"| {env_id} | {name} | {at[name]} | {d['episodes']} | {d['steps']} | "
                        f"{ret} |")  # fmt: skip
        stages = ", ".join(f"{s['env_steps']}: {s['test_return']:.0f}" for s in e["sac"]["stages"])
        rows.append(f"| {env_id} | random actions | - | - | - | {e['random_return']:.1f} |")
        rows.append("")
        rows.append(f"{env_id} SAC test returns by env step: {stages}.")
        rows.append("")
    return rows


def report(args: argparse.Namespace) -> None:
    """Write README.md's tables (between its two ``<!-- table -->`` lines; the text around them
    is kept) and the plots, from results.jsonl (trials of ``--gradient-steps``) and
    datasets.json."""
    out = Path(args.out_dir)
    info_file = out / "datasets.json"
    entries = json.loads(info_file.read_text()) if info_file.is_file() else {}
    results = [
        r for r in load_results(out / "results.jsonl")
        if r.get("gradient_steps") == args.gradient_steps
    ]  # fmt: skip
    rows = table(results, entries)
    figs = plots(results, entries, out / "plots")
    head = (out / "README.md").read_text() if (out / "README.md").is_file() else ""
    marker = "<!-- table -->"
    parts = head.split(marker)
    pre = parts[0] if len(parts) >= 3 else "# Offline benchmark (D4RL-style)\n\n"
    post = parts[2] if len(parts) >= 3 else "\n"
    errors = sum(1 for r in results if r.get("error"))
    body = [f"Budget: {args.gradient_steps:,} gradient steps per trial; "
            f"{len(results) - errors} trials ({errors} failed). Cells: normalised score mean "
            "± std over seeds (trials); wall s: median training seconds.", "",
            *rows, "", *datasets_table(entries)]  # fmt: skip
    if figs:
        body += [f"![{f[:-4]}](plots/{f})" for f in figs]
    text = pre + marker + "\n" + "\n".join(body) + "\n" + marker + post
    _write_atomic(out / "README.md", text)
    print("\n".join(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds per cell")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--gradient-steps", type=int, default=5_000, help="budget per trial")
    parser.add_argument("--test-episodes", type=int, default=10)
    parser.add_argument("--sac-steps", type=int, default=30_000, help="env steps of the SAC run")
    parser.add_argument("--sac-stage", type=int, default=2_500, help="env steps per stage")
    parser.add_argument("--sac-seed", type=int, default=0)
    parser.add_argument("--sac-set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="an override of the SAC run's config (repeatable)")  # fmt: skip
    parser.add_argument("--dataset-episodes", type=int, default=50,
                        help="episodes in the expert and medium datasets")  # fmt: skip
    parser.add_argument("--trial-timeout", type=float, default=3_600.0)
    parser.add_argument("--out-dir", default=str(HERE.parents[1] / "docs/benchmarks/offline-d4rl"))
    parser.add_argument("--work-dir", default="~/.cache/rlblocks-offline-d4rl",
                        help="SAC runs and the Minari datasets (not committed)")  # fmt: skip
    parser.add_argument("--datasets-only", action="store_true", help="stage (a) only")
    parser.add_argument("--report-only", action="store_true", help="redraw table and plots")
    parser.add_argument("--_trial", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._trial:
        print(json.dumps(trial(json.loads(args._trial))), flush=True)
        return 0
    for name, known in (("envs", None), ("datasets", DATASETS), ("libraries", LIBRARIES),
                        ("algos", ALGOS)):  # fmt: skip
        chosen = [x for x in getattr(args, name).split(",") if x]
        unknown = sorted(set(chosen) - set(known)) if known else []
        if unknown:
            parser.error(f"unknown {name} {unknown}; choose from {list(known or [])}")
        setattr(args, name, chosen)
    if args.sac_stage < 1:
        parser.error("--sac-stage must be at least 1 env step")
    if not args.report_only:
        entries = {env_id: make_datasets(env_id, args) for env_id in args.envs}
        if not args.datasets_only:
            run_trials(args, entries)
    report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
