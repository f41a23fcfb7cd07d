#!/usr/bin/env python
"""End-to-end training speed: env frames per second of a whole training run, rlblocks against
LeanRL's scripts, on one device (a GPU above all) in one invocation.

What is timed is training as a user runs it: collecting with the learning policy and taking the
gradient steps, for SAC, TD3 and PPO on HalfCheetah-v5 at an equal env-step budget
(``--steps``, 100k by default). Tests, checkpoints and logging are left out of the figure.

Contenders:

* ``rlblocks``: ``rlblocks.train(algo, env=ENV, device=DEVICE, loggers=[])`` with the
  algorithm's own HalfCheetah presets (SAC and TD3: 256-256 networks, batch 256, one gradient
  step per env step, one env; PPO: horizon 2048 over 8 envs, 10 epochs), on ``cuda`` when
  torch sees one, else ``cpu`` (``--device`` picks). On CUDA the off-policy gradient step is
  captured as a CUDA graph and replayed (``algo.cuda_graph``, on by default; the JSON records
  whether the policy captured it). Tests and checkpoints happen only once, at the end of the
  budget, and are outside the figure: frames/s comes from the trainer's own counters, env
  steps over the seconds spent collecting and updating (``TrainResult.collect_seconds +
  update_seconds``). A second figure, "after warm-up", counts only the steps and seconds from
  the first collect after the first gradient step: the window LeanRL's own figure covers.
* ``leanrl``: LeanRL (CleanRL's scripts with ``torch.compile`` and CUDA graphs, from
  github.com/pytorch-labs/LeanRL; not on the package index) from a checkout given as
  ``--leanrl PATH``: ``leanrl/sac_continuous_action_torchcompile.py``,
  ``td3_continuous_action_torchcompile.py`` and ``ppo_continuous_action_torchcompile.py`` run
  as subprocesses with their own settings and flags (``--compile --cudagraphs`` on CUDA, as its
  README runs them; ``--compile --no-cuda`` on a CPU), ``--env-id ENV --total-timesteps
  STEPS --seed S``, ``WANDB_MODE=disabled``. Its figure is the last speed the script reports
  itself (env steps per second from a few steps after its warm-up, ``learning_starts``, to
  the end); the script's whole process time (imports and compilation included) is kept too.
  A script that fails (missing ``tensordict``/``torchrl``/``tyro``/``wandb``, a gymnasium it
  does not support) is reported as an error row with its last line, and the rest goes on.
  ``--leanrl-python`` runs LeanRL under another interpreter (its own virtualenv);
  ``--leanrl-env`` gives it another env id (``HalfCheetah-v4`` for a gymnasium before 1.0:
  the same model, 17 observation and 6 action floats, 1000-step episodes).

Without ``--leanrl`` only rlblocks runs, and the output says so. Trials run in fresh
subprocesses (no shared CUDA context or caches), interleaved repeat by repeat
(``--repeats``, seed = repeat index); printed are the medians, their spread, and the ratio of
rlblocks' median to LeanRL's (above 1: rlblocks is faster), after warm-up against LeanRL's own
figure. It exits 0 whatever the numbers.

Run: ``python contrib/benchmarks/end_to_end_fps.py --leanrl ~/LeanRL [--algos sac,td3,ppo]
[--steps 100000] [--repeats 3] [--json out.json]``; ``--smoke`` is a tiny CPU run of rlblocks
alone (CI's check that the script works). See ``docs/benchmarks/gpu/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _trials import gist, run_json_trial

ALGOS = ("sac", "td3", "ppo")
LEANRL_SCRIPTS = {
    "sac": "sac_continuous_action_torchcompile.py",
    "td3": "td3_continuous_action_torchcompile.py",
    "ppo": "ppo_continuous_action_torchcompile.py",
}
#: LeanRL's progress bar ends with "<speed> sps, ..." (a tqdm description on stderr)
_SPS = re.compile(r"(\d+(?:\.\d+)?)\s*sps")
#: a smoke run's budget and the settings that make it fit (a CPU, well under a minute)
SMOKE_STEPS = 240
_SMOKE_NETS = "algo.hidden_sizes=[16, 16]"
SMOKE_SET = {
    "sac": ["trainer.warmup_steps=80", "trainer.batch_size=16", "buffer.size=500", _SMOKE_NETS],
    "td3": ["trainer.warmup_steps=80", "trainer.batch_size=16", "buffer.size=500", _SMOKE_NETS],
    "ppo": [
        "trainer.step_per_collect=80",
        "buffer.size=160",
        "trainer.batch_size=40",
        "trainer.repeat_per_collect=1",
        _SMOKE_NETS,
    ],
}


def pick_device(requested: str) -> str:
    """``requested``, or for ``auto`` ``cuda`` when torch sees a GPU, else ``cpu``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def rlblocks_overrides(algo: str, steps: int, smoke: bool) -> list[str]:
    """The budget, with one test and one checkpoint at its end and no logging on the way."""
    out = [
        f"trainer.max_env_steps={steps}",
        f"trainer.test_interval={steps}",
        "trainer.test_episodes=1",
        "trainer.test_in_training=false",
        "trainer.test_screen_episodes=0",
        f"trainer.checkpoint_interval={steps}",
        f"trainer.log_interval={steps}",
        "run.save_buffer=false",
        "env.num_test_envs=1",
    ]
    if algo == "ppo":
        out.append(f"algo.lr_decay_steps={steps}")
    if smoke:
        out += SMOKE_SET[algo]
    return out


def trial_rlblocks(
    algo: str, env: str, seed: int, steps: int, device: str, extra: list[str], smoke: bool
) -> dict[str, Any]:
    """One training run in this process; frames/s from the trainer's own counters."""
    import rlblocks
    from rlblocks.plugins import hookimpl

    mark: dict[str, float] = {}

    class AfterWarmup:
        """Notes the trainer's counters at the first collect after learning began."""

        @hookimpl
        def rlblocks_rollout_end(self, stats: Any, env_step: int, trainer: Any) -> None:
            st = trainer.state
            if "env_step" not in mark and st.gradient_step > 0:
                mark["env_step"] = float(env_step)
                mark["seconds"] = st.collect_seconds + st.update_seconds

    overrides = rlblocks_overrides(algo, steps, smoke) + list(extra)
    with tempfile.TemporaryDirectory(prefix="rlblocks-e2e-") as tmp:
        result = rlblocks.train(
            algo,
            env=env,
            seed=seed,
            device=device,
            loggers=[],
            progress=False,
            quiet=True,
            run_dir=f"{tmp}/run",
            overrides=overrides,
            hooks=[AfterWarmup()],
            stop_reward=1e12,  # never reached: the whole budget runs
        )
    train_seconds = result.collect_seconds + result.update_seconds
    out: dict[str, Any] = {
        "env_steps": result.env_steps,
        "gradient_steps": result.gradient_steps,
        "wall_seconds": result.wall_seconds,
        "collect_seconds": result.collect_seconds,
        "update_seconds": result.update_seconds,
        "test_seconds": result.test_seconds,
        "fps": result.env_steps / train_seconds if train_seconds > 0 else None,
        "fps_after_warmup": None,
        # asked for (the algorithm has the field and it is on) and captured (the policy holds
        # its graph after the first update: a CUDA device, a step the graph can take)
        "cuda_graph_asked": bool(getattr(result.agent.config.algo, "cuda_graph", False)),
        "cuda_graph": getattr(result.agent.policy, "_step_graph", None) is not None,
        "device": device,
    }
    if mark:
        steps_after = result.env_steps - mark["env_step"]
        seconds_after = train_seconds - mark["seconds"]
        if steps_after > 0 and seconds_after > 0:
            out["fps_after_warmup"] = steps_after / seconds_after
    if extra:
        out["rlblocks_set"] = list(extra)
    return out


def leanrl_command(algo: str, args: argparse.Namespace, device: str, seed: int) -> list[str]:
    """LeanRL's script for ``algo`` with its own settings: env, budget, seed and speed flags."""
    script = Path(args.leanrl).expanduser().resolve() / "leanrl" / LEANRL_SCRIPTS[algo]
    if args.leanrl_flags is not None:
        flags = args.leanrl_flags.split()
    elif device.startswith("cuda"):
        flags = ["--compile", "--cudagraphs"]
    else:
        flags = ["--compile", "--no-cuda"]
    return [
        args.leanrl_python or sys.executable, str(script),
        "--env-id", args.leanrl_env or args.env,
        "--total-timesteps", str(args.steps),
        "--seed", str(seed),
        *flags,
    ]  # fmt: skip


def trial_leanrl(cmd: list[str], steps: int, timeout: float) -> dict[str, Any]:
    """Run one LeanRL script; its own last reported speed, and frames/s of the whole process."""
    script = Path(cmd[1])
    if not script.is_file():
        return {"error": f"no LeanRL script at {script}: give --leanrl the repository's root"}
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
            cwd=script.parent.parent,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {timeout:.0f} s (--leanrl-timeout)"}
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    reported = _SPS.findall(proc.stderr + proc.stdout)
    return {
        "env_steps": steps,
        "process_seconds": seconds,
        "fps_process": steps / seconds,
        "fps_reported": float(reported[-1]) if reported else None,
    }


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _cell(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    m = statistics.median(got)
    return f"{m:,.0f} ({min(got):,.0f}-{max(got):,.0f})" if len(got) > 1 else f"{m:,.0f}"


def summarise(trials: list[dict[str, Any]], algos: list[str], with_leanrl: bool) -> dict[str, Any]:
    """Medians per algorithm and contender, and rlblocks' ratio to LeanRL."""
    summary: dict[str, Any] = {}
    for algo in algos:
        mine = [t for t in trials if t["algo"] == algo and t["framework"] == "rlblocks"]
        peer = [t for t in trials if t["algo"] == algo and t["framework"] == "leanrl"]
        row: dict[str, Any] = {
            "rlblocks_fps": _median([t.get("fps") for t in mine]),
            "rlblocks_fps_after_warmup": _median([t.get("fps_after_warmup") for t in mine]),
            "rlblocks_errors": [gist(t["error"]) for t in mine if "error" in t],
        }
        if with_leanrl:
            row["leanrl_fps_reported"] = _median([t.get("fps_reported") for t in peer])
            row["leanrl_fps_process"] = _median([t.get("fps_process") for t in peer])
            row["leanrl_errors"] = [gist(t["error"]) for t in peer if "error" in t]
            ours, theirs = row["rlblocks_fps_after_warmup"], row["leanrl_fps_reported"]
            row["ratio"] = ours / theirs if ours and theirs else None
            ours, theirs = row["rlblocks_fps"], row["leanrl_fps_process"]
            row["ratio_whole_run"] = ours / theirs if ours and theirs else None
        summary[algo] = row
    return summary


def print_table(trials: list[dict[str, Any]], summary: dict[str, Any], with_leanrl: bool) -> None:
    """The medians (min-max over repeats) and the ratios, as a markdown table."""
    head = "| algo | rlblocks frames/s (whole run) | rlblocks frames/s (after warm-up) |"
    rule = "| --- | --- | --- |"
    if with_leanrl:
        head += (
            " LeanRL frames/s (its report) | LeanRL frames/s (process)"
            " | ratio | ratio (whole run) |"
        )
        rule += " --- | --- | --- | --- |"
    print(head)
    print(rule)
    for algo, row in summary.items():
        mine = [t for t in trials if t["algo"] == algo and t["framework"] == "rlblocks"]
        line = (
            f"| {algo} | {_cell([t.get('fps') for t in mine])} "
            f"| {_cell([t.get('fps_after_warmup') for t in mine])} |"
        )
        if with_leanrl:
            peer = [t for t in trials if t["algo"] == algo and t["framework"] == "leanrl"]
            ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "-"
            whole = f"{row['ratio_whole_run']:.2f}x" if row["ratio_whole_run"] else "-"
            line += (
                f" {_cell([t.get('fps_reported') for t in peer])}"
                f" | {_cell([t.get('fps_process') for t in peer])} | {ratio} | {whole} |"
            )
        print(line)
    for algo, row in summary.items():
        for fw in ("rlblocks", "leanrl"):
            for err in row.get(f"{fw}_errors", []):
                print(f"{algo} {fw}: error: {err}")


def run_trial(
    fw: str, algo: str, seed: int, device: str, args: argparse.Namespace
) -> dict[str, Any]:
    base = {"framework": fw, "algo": algo, "seed": seed}
    if fw == "leanrl":
        cmd = leanrl_command(algo, args, device, seed)
        return {**base, "command": cmd, **trial_leanrl(cmd, args.steps, args.leanrl_timeout)}
    cmd = [
        sys.executable, str(Path(__file__).resolve()),
        "--_trial", algo, "--_seed", str(seed), "--device", device, "--env", args.env,
        "--steps", str(args.steps), "--torch-threads", str(args.torch_threads),
    ]  # fmt: skip
    cmd += ["--smoke"] if args.smoke else []
    for item in args.rlblocks_set:
        cmd += ["--rlblocks-set", item]
    return run_json_trial(cmd, base, timeout=args.rlblocks_timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algos", default=",".join(ALGOS), help="comma list of sac,td3,ppo")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (100,000)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per contender (3)")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cpu")
    parser.add_argument("--leanrl", default=None, help="path to a checkout of LeanRL's repository")
    parser.add_argument("--leanrl-python", default=None, help="interpreter for LeanRL's scripts")
    parser.add_argument("--leanrl-env", default=None, help="env id for LeanRL (default: --env)")
    parser.add_argument(
        "--leanrl-flags", default=None,
        help="LeanRL's speed flags instead of '--compile --cudagraphs' (one string)",
    )  # fmt: skip
    parser.add_argument("--leanrl-timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--rlblocks-timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument(
        "--rlblocks-set", action="append", default=[], metavar="KEY=VALUE",
        help="a config override for the rlblocks runs (as `rlblocks train --set`; repeatable)",
    )  # fmt: skip
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run (CI's check)")
    parser.add_argument("--json", default=None, help="write every trial and the medians here")
    parser.add_argument("--_trial", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = SMOKE_STEPS if args.smoke else 100_000
    if args.repeats is None:
        args.repeats = 1 if args.smoke else 3
    if args.smoke and args.device == "auto":
        args.device = "cpu"
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = sorted(set(algos) - set(ALGOS))
    if unknown or not algos:
        parser.error(f"--algos takes some of {','.join(ALGOS)}; got {args.algos!r}")
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")

    if args._trial:  # child: one rlblocks run, one JSON line
        import torch

        torch.set_num_threads(args.torch_threads)
        out = trial_rlblocks(
            args._trial,
            args.env,
            args._seed,
            args.steps,
            args.device,
            args.rlblocks_set,
            args.smoke,
        )
        print(json.dumps(out), flush=True)
        return 0

    with_leanrl = args.leanrl is not None
    if with_leanrl and not (Path(args.leanrl).expanduser() / "leanrl").is_dir():
        parser.error(
            f"--leanrl {args.leanrl}: no leanrl/ folder of scripts there; give the root of a "
            "checkout of github.com/pytorch-labs/LeanRL"
        )
    device = pick_device(args.device)
    print(
        f"end-to-end frames/s on {args.env}, {args.steps:,} env steps per run, "
        f"{args.repeats} repeat(s), device {device}"
    )
    if not with_leanrl:
        print("rlblocks only: no --leanrl PATH was given, so LeanRL's scripts are not run")
    frameworks = ["rlblocks", "leanrl"] if with_leanrl else ["rlblocks"]
    trials: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for algo in algos:
            order = frameworks if rep % 2 == 0 else frameworks[::-1]
            for fw in order:
                t = run_trial(fw, algo, rep, device, args)
                trials.append(t)
                note = (
                    gist(t["error"])
                    if "error" in t
                    else (
                        f"{t.get('fps') or t.get('fps_reported') or t.get('fps_process') or 0:,.0f}"
                        " frames/s"
                    )
                )
                print(f"  repeat {rep} {algo} {fw}: {note}", flush=True)
    summary = summarise(trials, algos, with_leanrl)
    print()
    print_table(trials, summary, with_leanrl)
    if with_leanrl and all(row["leanrl_fps_reported"] is None for row in summary.values()):
        print("LeanRL reported no figure: rlblocks only (see the errors above)")
    if args.json:
        out = {"env": args.env, "steps": args.steps, "repeats": args.repeats, "device": device,
               "trials": trials, "summary": summary}  # fmt: skip
        path = Path(args.json)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n", "utf-8")
        os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
