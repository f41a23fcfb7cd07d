"""Several seeds of one run: in parallel processes or on a Ray cluster, then a summary of the
final returns that is honest about the spread (Agarwal et al., 2021, "Deep RL at the edge of the
statistical precipice": the interquartile mean and 95% bootstrap confidence intervals).

``rlblocks train dqn --seeds 0-4 --workers 2`` writes ``RUN_DIR/seed-0`` ... ``seed-4`` and
``RUN_DIR/summary.json``. The statistics come from :mod:`rlblocks.tools._stats`, shared with
``rlblocks plot --seeds``: percentile intervals of a bootstrap over the seeds (with one task,
the paper's stratified bootstrap is this plain one), and a warning under 5 seeds.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

import numpy as np

from rlblocks.contracts import ConfigError
from rlblocks.tools._stats import STATISTICS, few_seeds_note, stratified_bootstrap

__all__ = ["parse_seeds", "summarize", "train_seeds"]


#: the most seeds one ``--seeds`` trains (each a whole run with its own directory)
MAX_SEEDS = 1000


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"1,5,9"``; ``"0-2,10"``; duplicates refused."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
            if b < a:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"seeds {text!r}: write a range or a list, e.g. 0-4 or 0,3,7"
            ) from None
        if len(seeds) + (b - a + 1) > MAX_SEEDS:  # counted before any list is made
            raise ConfigError(
                f"seeds {text!r}: {len(seeds) + b - a + 1} seeds, and one command trains at "
                f"most {MAX_SEEDS}; train fewer (e.g. 0-9), or split them over several commands "
                "(each into its own --run-dir)"
            )
        seeds += list(range(a, b + 1))
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"seeds {text!r}: seeds must be distinct and non-negative")
    if any(s > 2**63 - 1 for s in seeds):
        raise ConfigError(f"seeds {text!r}: a seed is at most 2**63 - 1")
    return seeds


def summarize(scores: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Mean, median, IQM (each with a 95% bootstrap interval), std, min and max of ``scores``
    (non-finite ones left out), and ``note``: the warning for too few seeds, or None."""
    x = np.asarray([s for s in scores if s is not None and math.isfinite(s)], dtype=np.float64)
    if len(x) == 0:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(x)}
    for name, fn in STATISTICS.items():
        out[name] = float(fn(x, axis=0))
        low, high = stratified_bootstrap([x], fn, resamples=5000, seed=seed)
        out[f"{name}_ci95"] = [float(low), float(high)]
    out["std"] = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    out["min"], out["max"] = float(x.min()), float(x.max())
    out["note"] = few_seeds_note(len(x))
    return out


def _train_one(algo: str, seed: int, run_dir: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """One seed's run (in a worker process); the result as plain data."""
    from rlblocks.run import train

    result = train(algo, seed=seed, run_dir=run_dir, **kwargs)
    return {"seed": seed, **result.to_dict()}


Job = tuple[str, int, str, dict[str, Any]]
Done = Callable[[int, "dict[str, Any] | None", "BaseException | None"], None]


class SeedProcessDied(RuntimeError):
    """A seed's process ended without a result (a crash in native code, killed from outside)."""


class SeedError(RuntimeError):
    """What a seed's run raised, carried from its process as text: :attr:`kind` is the name of
    the exception's type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _seed_process(job: Job, results: Any, control: Any, parent_pid: int) -> None:
    """A seed's process: dies with its parent, takes its stop requests, sends back
    ``("done", result)``, ``("failed", "Type: message")`` or ``("stopped", None)``."""
    from rlblocks.tools._children import attach_to_parent

    stop = attach_to_parent(parent_pid, control)
    algo, seed, run_dir, kwargs = job
    kwargs = {**kwargs, "hooks": [*(kwargs.get("hooks") or ()), stop]}
    try:
        message: tuple[str, Any] = ("done", _train_one(algo, seed, run_dir, kwargs))
    except KeyboardInterrupt:  # a second Ctrl-C at the terminal: stopped at once
        message = ("stopped", None)
    except BaseException as exc:
        message = ("failed", (type(exc).__name__, str(exc)))
    with contextlib.suppress(OSError):  # the parent is gone
        results.send(message)


class _Child:
    """A seed's process as the parent sees it."""

    def __init__(self, ctx: Any, job: Job) -> None:
        self.seed = job[1]
        self.results, child_results = ctx.Pipe(duplex=False)
        child_control, self.control = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=_seed_process, args=(job, child_results, child_control, os.getpid()),
            name=f"rlblocks-seed-{self.seed}",
        )  # fmt: skip
        self.process.start()
        child_results.close()
        child_control.close()
        self.killed = False

    def ask_stop(self, name: str) -> None:
        with contextlib.suppress(OSError):  # it is ending anyway
            self.control.send(name)

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError, ValueError):  # gone, or reaped
            self.process.kill()

    def collect(self) -> tuple[str, Any]:
        """Its message, once :attr:`results` is ready; its process is reaped."""
        try:
            message = self.results.recv()
        except (EOFError, OSError):
            message = None
        self.process.join(30)
        if self.process.exitcode is None:  # sent its result, then hung on the way out
            self.process.kill()
            self.process.join()
        self.results.close()
        self.control.close()
        if message is not None:
            return message
        if self.killed:
            return ("stopped", None)
        code = self.process.exitcode
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit status {code}")  # fmt: skip
        return ("died", how)


def _run_in_processes(
    jobs: Sequence[Job],
    workers: int,
    done: Done,
    stopped: Callable[[int, str], None],
) -> str | None:
    """Run ``jobs`` in ``workers`` spawned processes at a time, each tied to this one (see
    :mod:`rlblocks.tools._children`). SIGINT or SIGTERM asks the running seeds to stop after
    their current iteration and starts no more; a second one kills them. Returns the name of
    the first signal, or None."""
    from rlblocks.tools._children import stop_signals

    ctx = multiprocessing.get_context("spawn")  # no forked torch or env state
    queue = list(jobs)
    running: dict[Any, _Child] = {}
    received: list[str] = []
    acted = 0
    try:
        with stop_signals(received):
            while queue or running:
                if len(received) > acted:
                    acted = len(received)
                    name = received[0]
                    seeds = sorted(c.seed for c in running.values())
                    if acted == 1:
                        for child in running.values():
                            child.ask_stop(name)
                        print(f"\n{name}: stopping seeds {seeds} after their current iteration "
                              "(each writes a checkpoint) and starting no more; send it again "
                              "to stop them at once", file=sys.stderr, flush=True)  # fmt: skip
                    else:
                        for child in running.values():
                            child.kill()
                        print(f"\n{received[-1]}: stopping seeds {seeds} at once",
                              file=sys.stderr, flush=True)  # fmt: skip
                while queue and len(running) < workers and not received:
                    child = _Child(ctx, queue.pop(0))
                    running[child.results] = child
                if not running:
                    break
                for conn in wait_for(list(running), timeout=0.5):
                    child = running.pop(conn)
                    kind, value = child.collect()
                    if kind == "done":
                        done(child.seed, value, None)
                    elif kind == "failed":
                        done(child.seed, None, SeedError(*value))
                    elif kind == "stopped":
                        stopped(child.seed, "stopped at once")
                    else:
                        done(child.seed, None, SeedProcessDied(f"its process ended ({value})"))
    finally:  # an error here (or in a report) leaves no seed running
        for child in running.values():
            child.kill()
            child.process.join()
    return received[0] if received else None


def train_seeds(
    algo: str,
    seeds: Sequence[int],
    run_dir: str | os.PathLike[str],
    workers: int | None = None,
    ray_address: str | None = None,
    report: Callable[[str], None] = print,
    **train_kwargs: Any,
) -> dict[str, Any]:
    """Train ``algo`` once per seed into ``run_dir/seed-N`` (``workers`` processes at a time,
    or as Ray tasks on the cluster at ``ray_address``; ``"local"`` starts a local Ray), then
    summarise the final and best test returns into ``run_dir/summary.json``."""
    from rlblocks.run import write_json

    if not seeds:
        raise ConfigError("no seeds to train")
    base = Path(run_dir)
    base.mkdir(parents=True, exist_ok=True)
    kwargs = dict(train_kwargs)
    kwargs["progress"] = False
    kwargs["quiet"] = True
    if len(seeds) > 1:  # one torch thread per run unless asked otherwise
        overrides = list(kwargs.get("overrides") or ())
        if not any(o.startswith("run.torch_threads=") for o in overrides):
            overrides.append("run.torch_threads=1")
        kwargs["overrides"] = overrides
    jobs = [(algo, s, str(base / f"seed-{s}"), kwargs) for s in seeds]
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    interrupted: list[int] = []
    failed_seeds: list[int] = []
    signals: list[str] = []  # the signals that stopped runs

    def done(seed: int, res: dict[str, Any] | None, err: BaseException | None) -> None:
        if err is not None:
            failed_seeds.append(seed)
            failures.append(f"seed {seed}: {getattr(err, 'kind', type(err).__name__)}: {err}")
            report(f"seed {seed}: FAILED: {err}")
            return
        assert res is not None
        reason = str(res.get("stop_reason", ""))
        if reason.startswith("interrupted"):
            # stopped by SIGINT/SIGTERM short of its budget: not a result to average
            signals.append(reason.removeprefix("interrupted by ").split()[0] or "interrupted")
            stopped(seed, f"{reason} at {res.get('env_steps')} env steps")
            return
        results.append(res)
        report(
            f"seed {seed}: last test {res.get('last_test_return')}, best "
            f"{res.get('best_test_return')}, {'solved' if res.get('solved') else 'not solved'}, "
            f"{res.get('env_steps')} env steps, {res.get('wall_seconds', 0.0):.1f} s"
        )

    def stopped(seed: int, how: str) -> None:
        interrupted.append(seed)
        where = shlex.quote(str(base / f"seed-{seed}"))
        report(f"seed {seed}: {how}; continue it: rlblocks resume {where}")

    if ray_address is not None:
        _run_on_ray(jobs, ray_address, done)
    else:
        n = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
        if n == 1:
            for job in jobs:
                try:
                    done(job[1], _train_one(*job), None)
                except Exception as exc:
                    done(job[1], None, exc)
                if interrupted:  # Ctrl-C stops the whole set, not just the seed it hit
                    break
        else:
            first = _run_in_processes(jobs, n, done, stopped)
            if first is not None:
                signals.insert(0, first)
    results.sort(key=lambda r: r["seed"])
    handled = {r["seed"] for r in results} | set(interrupted) | set(failed_seeds)
    summary = {
        "algo": algo,
        "run_dir": str(base),
        "env": _env_of([base / f"seed-{r['seed']}" for r in results]),
        "seeds": [r["seed"] for r in results],
        "failed": failures,
        "interrupted": sorted(interrupted),
        "not_started": [s for s in seeds if s not in handled],
        "final_return": summarize([_num(r.get("last_test_return")) for r in results]),
        "best_return": summarize([_num(r.get("best_test_return")) for r in results]),
        "solved": sum(bool(r.get("solved")) for r in results),
        "runs": results,
    }
    if results or not (base / "summary.json").is_file():
        write_json(base / "summary.json", summary)
    else:  # nothing finished: an earlier summary of this folder is worth more than an empty one
        report(f"no seed finished; {base / 'summary.json'} is left as it was")
    report(format_summary(summary))
    if summary["interrupted"] or summary["not_started"]:
        report(stop_note(summary, base, signals[0] if signals else None))
    return summary


def stop_note(summary: Mapping[str, Any], base: Path, signal_name: str | None = None) -> str:
    """One line on a set of seeds cut short: which runs stopped, where they are, how to go on."""
    parts = [f"{signal_name or 'interrupted'}: "]
    stopped, waiting = summary["interrupted"], summary["not_started"]
    if stopped:
        parts.append(f"stopped seed(s) {', '.join(map(str, stopped))} (their runs: "
                     f"{base / 'seed-N'}; continue one with `rlblocks resume "
                     f"{base / f'seed-{stopped[0]}'}`)")  # fmt: skip
    if waiting:
        listed = ",".join(map(str, waiting))
        parts.append(("; " if stopped else "") + f"seed(s) {listed.replace(',', ', ')} not "
                     f"started (start them with --seeds {listed})")  # fmt: skip
    return "".join(parts)


def exit_status(summary: Mapping[str, Any]) -> int:
    """The command's exit status for a set of seeds: 130 when interrupted, 1 when a seed
    failed, else 0 (finished, solved or not)."""
    if summary.get("interrupted") or summary.get("not_started"):
        return 130
    return 1 if summary.get("failed") else 0


def _num(x: Any) -> float:
    return float(x) if x is not None else math.nan


def _env_of(run_dirs: Sequence[Path]) -> str | None:
    """The env id the seeds' runs trained on (from their run directories), if one."""
    from rlblocks.run import run_label

    envs = set()
    for run_dir in run_dirs:
        with contextlib.suppress(Exception):
            envs.add(run_label(run_dir)[1])
    return envs.pop() if len(envs) == 1 else None


def format_summary(summary: dict[str, Any]) -> str:
    """A few readable lines: where the runs are, final and best returns over seeds with their
    intervals, and the warning for too few seeds."""
    env = f" on {summary['env']}" if summary.get("env") else ""
    lines = [f"{summary['algo']}{env}: {len(summary['seeds'])} seed(s) finished, "
             f"{summary['solved']} solved; runs in {summary.get('run_dir', '?')}"]  # fmt: skip
    for key, label in (("final_return", "final test return"), ("best_return", "best test return")):
        s = summary[key]
        if not s.get("n"):
            lines.append(f"  {label}: no finished test")
            continue
        lines.append(
            f"  {label}: mean {s['mean']:.1f} [{s['mean_ci95'][0]:.1f}, {s['mean_ci95'][1]:.1f}]"
            f", IQM {s['iqm']:.1f} [{s['iqm_ci95'][0]:.1f}, {s['iqm_ci95'][1]:.1f}], "
            f"median {s['median']:.1f}, std {s['std']:.1f}, min {s['min']:.1f}, "
            f"max {s['max']:.1f} (95% bootstrap intervals)"
        )
    note = summary["final_return"].get("note")
    if note:
        lines.append(f"  warning: {note}")
    for f in summary["failed"]:
        lines.append(f"  failed: {f}")
    if summary.get("interrupted"):
        lines.append(f"  interrupted (not in the figures above): seeds {summary['interrupted']}")
    if summary.get("not_started"):
        lines.append(f"  not started: seeds {summary['not_started']}")
    return "\n".join(lines)


def _run_on_ray(
    jobs: list[tuple[str, int, str, dict[str, Any]]],
    address: str,
    done: Callable[[int, dict[str, Any] | None, BaseException | None], None],
) -> None:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--ray needs Ray: pip install 'rlblocks[ray]'") from exc
    started = False
    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(_train_one)
        refs = {remote.remote(*job): job[1] for job in jobs}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    done(refs[ref], ray.get(ref), None)
                except Exception as exc:
                    done(refs[ref], None, exc)
    finally:
        if started:
            ray.shutdown()
