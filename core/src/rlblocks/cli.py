"""The ``rlblocks`` command: list installed components, train an agent, resume a run, and get
the agent back (eval, collect a dataset, plot, describe).

Module-level imports stay light: ``rlblocks list`` must work without importing torch or numpy, so
the training machinery is imported inside the commands that need it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import math
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlblocks.contracts import RlblocksError
from rlblocks.run import command_line

_KINDS = ("algo", "buffer", "env", "logger", "family")


def _kind(value: str) -> str:
    kind = value.lower()
    if kind not in _KINDS and kind.endswith("s") and kind[:-1] in _KINDS:
        kind = kind[:-1]
    if kind not in _KINDS:
        raise argparse.ArgumentTypeError(f"unknown kind {value!r}; choose from {', '.join(_KINDS)}")
    return kind


def _override(value: str) -> str:
    key, sep, _ = value.partition("=")
    if not sep or "." not in key:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an override; write it as section.field=value (trainer.lr=3e-4)"
        )
    return value


def _env_steps(value: str) -> int:
    """A positive number of env steps, written as an integer or as 2e5 (an integral float)."""
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        number = float("nan")
    if not (math.isfinite(number) and number >= 1 and number == int(number)):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of env steps; write a positive integer (200000 or 2e5)"
        )
    return int(number)


def _gradient_steps(value: str) -> int:
    """A positive number of gradient steps, written as an integer or as 1e6."""
    try:
        return _env_steps(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of gradient steps; write a positive integer (100000 or "
            "1e5)"
        ) from None


def _positive_int(value: str) -> int:
    """A count that must be at least 1 (episodes, trials, workers)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return number


def _seed(value: str) -> int:
    """A seed: a whole number from 0 to 2**63 - 1 (negative seeds are refused by gymnasium,
    larger ones by torch)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 2**63 - 1:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a seed; write a whole number from 0 to 2**63 - 1"
        )
    return number


def _run_dir(value: str) -> Path:
    """A run directory; an empty one (``--run-dir ""``) would be the current directory."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "an empty run directory would put the run's files into the current directory; name "
            "a directory (--run-dir runs/my-run)"
        )
    return Path(value)


#: flags that say the same as a ``--set`` of a config field: (flag, its args attribute, field)
_FIELD_FLAGS = (
    ("--max-env-steps", "max_env_steps", "trainer.max_env_steps"),
    ("--max-gradient-steps", "max_gradient_steps", "trainer.max_gradient_steps"),
    ("--dataset", "dataset", "buffer.dataset"),
    ("--num-envs", "num_envs", "env.num_envs"),
    ("--logger", "logger", "run.loggers"),
    ("--env", "env", "env.id"),
    ("--backend", "backend", "env.backend"),
    ("--buffer", "buffer", "buffer.name"),
    ("--stop-reward", "stop_reward", "trainer.stop_reward"),
    ("--device", "device", "run.device"),
)


def _check_budget(args: argparse.Namespace) -> None:
    """``--max-env-steps`` and ``--set trainer.max_env_steps=...`` say the same thing: one only
    (the same for every flag that sets a config field: ``--num-envs``, ``--logger``...). The
    ``--set`` would win, so the flag would be ignored without a word."""
    for flag, attr, path in _FIELD_FLAGS:
        if getattr(args, attr, None) is not None and any(
            o.replace(" ", "").startswith(f"{path}=") for o in args.set or ()
        ):
            raise RlblocksError(
                f"pass {flag} or --set {path}=..., not both (the --set would win and {flag} "
                "would be ignored)"
            )


def _with_budget(
    overrides: list[str], max_env_steps: int | None, max_gradient_steps: int | None = None
) -> list[str]:
    """``overrides`` with ``--max-env-steps`` as ``trainer.max_env_steps`` (and
    ``--max-gradient-steps`` as ``trainer.max_gradient_steps``): how a continued run gets a new
    budget."""
    out = list(overrides)
    if max_env_steps is not None:
        out.append(f"trainer.max_env_steps={max_env_steps}")
    if max_gradient_steps is not None:
        out.append(f"trainer.max_gradient_steps={max_gradient_steps}")
    return out


def _resume_overrides(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """The saved config's changes a resume's flags ask for: ``--max-env-steps`` or
    ``--max-gradient-steps`` (the budget), ``--device`` (``run.device``: a run trained on a GPU
    continues on a machine without one) and ``--no-progress`` (``run.progress``)."""
    out = _with_budget(overrides, args.max_env_steps, getattr(args, "max_gradient_steps", None))
    if getattr(args, "device", None) is not None:
        out.append(f"run.device={args.device}")
    if getattr(args, "no_progress", False):
        out.append("run.progress=false")
    return out


# -- list ---------------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _flatten(mapping: dict, prefix: str = "") -> list[str]:
    items = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append(f"{prefix}{key}={_format_value(value)}")
    return items


def _format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return ", ".join(_flatten(value)) or "-"
    return str(value)


def cmd_list(args: argparse.Namespace) -> int:
    """Print every installed component, one per row; broken plugins are marked, not fatal.
    Components of a template distribution (the plugin template, made to be copied) are left out
    unless ``--all``."""
    from rlblocks.plugins import TEMPLATE_DISTRIBUTIONS, canonical_distribution_name, get_registry

    kinds = [args.kind] if args.kind else list(_KINDS)
    rows: list[tuple[str, str, str, str, str]] = []
    details: list[dict[str, Any] | None] = []
    broken = 0
    names_seen: dict[tuple[str, str], list[str]] = {}
    for kind in kinds:
        registry = get_registry(kind)
        for entry in registry.entries():
            dist_name = canonical_distribution_name(entry.distribution or "")
            if dist_name in TEMPLATE_DISTRIBUTIONS and not getattr(args, "all", False):
                continue
            names_seen.setdefault((kind, entry.name), []).append(entry.distribution or "")
            detail: dict[str, Any] | None = None
            try:
                spec = registry.spec(entry.qualified_name)
                summary = spec.summary
                if args.details:
                    detail = spec.describe()
            except RlblocksError as exc:
                summary = f"BROKEN: {_first_line(exc)}"
                broken += 1
                if args.debug:
                    traceback.print_exception(exc)
            dist = entry.distribution or f"({entry.origin})"
            rows.append((entry.name, kind, dist, entry.version or "-", summary))
            details.append(detail)

    if not rows:
        what = f"{args.kind} components" if args.kind else "components"
        print(f"no {what} installed; plugins are pip packages such as rlblocks-algo-ppo "
              "(from the rlblocks repository: pip install ./plugins/algos/ppo)")
        return 0
    header = ("NAME", "KIND", "DISTRIBUTION", "VERSION", "SUMMARY")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row, detail in zip([header, *rows], [None, *details]):
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths)]
        print("  ".join([*cells, row[4]]).rstrip())
        for key, value in (detail or {}).items():
            print(f"    {key}: {_format_value(value)}")

    for (kind, name), dists in names_seen.items():
        if len(dists) > 1:
            choices = " or ".join(f"{name}@{d}" for d in dists)
            print(f"warning: {kind} {name!r} is registered by {len(dists)} distributions; "
                  f"pick one with {choices}", file=sys.stderr)
    if broken:
        print(f"warning: {broken} plugin(s) failed to load; `rlblocks list --debug` shows why",
              file=sys.stderr)
    return 0


# -- train / resume -----------------------------------------------------------------------------


def _loggers(args: argparse.Namespace) -> list[str] | None:
    """``run.loggers`` from ``--logger`` (repeatable) and ``--no-default-loggers``: each
    ``--logger`` is added to the default loggers (those installed, or the ``--config`` file's
    ``run.loggers``) unless ``--no-default-loggers`` leaves them out; None (the run's default)
    without either flag."""
    extra = list(args.logger or ())
    if getattr(args, "no_default_loggers", False):
        if any(o.replace(" ", "").startswith("run.loggers=") for o in args.set or ()):
            raise RlblocksError(
                "pass --no-default-loggers or --set run.loggers=..., not both (the --set names "
                "every logger already)"
            )
        return list(dict.fromkeys(extra))
    if not extra:
        return None
    run = importlib.import_module("rlblocks.run")
    base: list[str] | None = None
    if args.config is not None and Path(args.config).is_file():  # a missing one: the run says
        section = run.load_config_file(args.config).get("run")
        if isinstance(section, dict) and isinstance(section.get("loggers"), list):
            base = [str(n) for n in section["loggers"]]
    if base is None:
        base = run.installed_default_loggers()
    return list(dict.fromkeys([*base, *extra]))


def train_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``experiment.train`` that ``rlblocks train``'s flags give, the
    same for one run and for each of several seeds (``seed`` and ``run_dir`` are per run)."""
    return {
        "env": args.env,
        "stop_reward": args.stop_reward,
        "backend": args.backend,
        "buffer": args.buffer,
        "num_envs": args.num_envs,
        "loggers": _loggers(args),
        "config": args.config,
        "overrides": list(args.set or ()),
        "device": args.device,
        "max_env_steps": args.max_env_steps,
        "max_gradient_steps": args.max_gradient_steps,
        "dataset": args.dataset,
        "init_from": args.init_from,
        "init_buffer": args.init_buffer,
        "trust_imports": args.trust_imports,
    }


def dry_run(args: argparse.Namespace) -> dict[str, Any]:
    """The config ``rlblocks train`` would run with these flags, as ``config.json`` holds it
    (``--config`` reads it back). Checks what the run would check before it trains: the plugin
    names, every config field, the env id, the device, the algorithm against the env's spaces
    (``compose.preflight``) and that ``--run-dir`` holds no run; trains and writes nothing."""
    experiment = importlib.import_module("rlblocks.run")
    cfg = importlib.import_module("rlblocks.run")
    resolved = experiment.resolve_train_config(
        args.algo,
        seed=args.seed,
        run_dir=args.run_dir,
        progress=False if args.no_progress else None,
        **train_settings(args),
    )
    importlib.import_module("rlblocks.run").preflight(resolved)
    if resolved.run.run_dir is not None:
        from rlblocks.contracts import writable_dir_problem

        problem = writable_dir_problem(resolved.run.run_dir)
        if problem is not None:
            raise RlblocksError(f"the run directory {problem}")
        experiment.refuse_existing_run(resolved.run.run_dir, args.overwrite)
    return cfg.to_dict(resolved)


def cmd_train(args: argparse.Namespace) -> int:
    """Train ``args.algo``; 0 when the run finished, solved or not."""
    experiment = importlib.import_module("rlblocks.run")
    _check_budget(args)
    if args.dry_run:
        if args.seeds is not None or args.resume or args.workers is not None or args.ray:
            raise RlblocksError(
                "--dry-run shows one new run's config; leave out --seeds, --workers, --ray and "
                "--resume"
            )
        import json

        print(json.dumps(dry_run(args), indent=2))
        return 0
    common = train_settings(args)
    if args.trust_imports and not (args.resume or args.init_from):
        raise RlblocksError(
            "--trust-imports goes with --resume or --init-from (a run from elsewhere); a new "
            "run imports what you name yourself"
        )
    if args.continue_solved and not args.resume:
        raise RlblocksError("--continue-solved goes with --resume (a solved run to train on)")
    if args.seeds is not None:
        seeds = importlib.import_module("rlblocks.tools")
        if args.seed is not None:
            raise RlblocksError("pass --seed or --seeds, not both")
        if args.resume:
            raise RlblocksError(
                "--resume continues one run; continue each seed's run with "
                "`rlblocks resume RUN_DIR/seed-N`"
            )
        run_dir = args.run_dir
        if run_dir is None:  # named by the env the runs train on, as a single run's folder is
            env_id = args.env or experiment.resolve_train_config(
                args.algo, seed=0, progress=False, **common
            ).env.id
            run_dir = experiment.default_run_dir(args.algo, str(env_id))
        summary = seeds.train_seeds(
            args.algo,
            seeds.parse_seeds(args.seeds),
            run_dir=run_dir,
            workers=args.workers,
            ray_address=args.ray,
            overwrite=args.overwrite,
            **common,
        )
        return seeds.exit_status(summary)
    if args.workers is not None or args.ray is not None:
        raise RlblocksError("--workers and --ray go with --seeds (several runs)")
    if args.resume:
        if args.run_dir is None:
            raise RlblocksError("--resume needs --run-dir (the run to continue)")
        if not (Path(args.run_dir) / "config.json").is_file():
            replaced = importlib.import_module("rlblocks.run").replaced_run_note(args.run_dir)
            raise RlblocksError(
                f"--resume: {args.run_dir} holds no run yet (no config.json)"
                + (f"; {replaced}" if replaced else "")
            )
        _check_resume_flags(args)
        overrides = _resume_overrides(args, common["overrides"])
        result = experiment.resume(
            args.run_dir,
            overrides=overrides,
            trust_imports=args.trust_imports,
            continue_solved=args.continue_solved,
        )
        return _exit_code(result)
    result = experiment.train(
        args.algo,
        seed=args.seed,
        run_dir=args.run_dir,
        progress=False if args.no_progress else None,
        overwrite=args.overwrite,
        **common,
    )
    return _exit_code(result)


def _check_resume_flags(args: argparse.Namespace) -> None:
    """``train ALGO --resume`` continues the saved run as it was: an algorithm other than the
    saved one, or flags that would change its setup, are refused rather than ignored."""
    import json

    saved = json.loads((Path(args.run_dir) / "config.json").read_text(encoding="utf-8"))
    if saved.get("algo_name") not in (None, args.algo):
        raise RlblocksError(
            f"--resume: {args.run_dir} holds a {saved.get('algo_name')} run, not {args.algo}"
        )
    ignored = [flag for flag, value in (
        ("--env", args.env), ("--seed", args.seed), ("--config", args.config),
        ("--backend", args.backend), ("--buffer", args.buffer), ("--num-envs", args.num_envs),
        ("--stop-reward", args.stop_reward), ("--dataset", args.dataset),
        ("--init-from", args.init_from), ("--init-buffer", args.init_buffer or None),
    ) if value is not None]  # fmt: skip
    if ignored:
        raise RlblocksError(
            f"--resume continues the run with its saved settings, so {', '.join(ignored)} would "
            "be ignored; leave them out (--set SECTION.FIELD=VALUE, --max-env-steps, "
            "--max-gradient-steps, --device and --no-progress change a resumed run)"
        )


def _exit_code(result: Any) -> int:
    """0 for a run that finished, solved or not; 130 for one stopped by SIGINT or SIGTERM."""
    reason = str(getattr(result, "stop_reason", ""))
    return 130 if reason.startswith("interrupted") else 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue the run in ``args.run_dir`` from its last checkpoint."""
    experiment = importlib.import_module("rlblocks.run")
    _check_budget(args)
    result = experiment.resume(
        args.run_dir,
        overrides=_resume_overrides(args, list(args.set or ())),
        trust_imports=args.trust_imports,
        continue_solved=args.continue_solved,
    )
    return _exit_code(result)


# -- after training -----------------------------------------------------------------------------


def cmd_collect(args: argparse.Namespace) -> int:
    """Record a dataset from a run's agent (or its replay buffer) and say what was written."""
    run = importlib.import_module("rlblocks.run")
    written = run.collect_dataset(
        args.run, args.out, args.episodes, mode=args.mode, epsilon=args.epsilon,
        sigma=args.sigma, random_fraction=args.random_fraction, format=args.format,
        seed=args.seed, which=args.which, device=args.device, overwrite=args.overwrite,
        trust_imports=args.trust_imports, max_steps_per_episode=args.max_steps_per_episode,
    )  # fmt: skip
    print(f"wrote {written.format} dataset: {written}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Load a run's agent, play ``--episodes`` test episodes, print their returns."""
    if args.video is None:
        # the video's settings without a video would be silently ignored: say what is missing
        given = [flag for flag, value in (("--video-episodes", args.video_episodes),
                                          ("--fps", args.fps), ("--max-frames", args.max_frames))
                 if value is not None]  # fmt: skip
        if given:
            raise RlblocksError(
                f"{', '.join(given)} set{'s' * (len(given) == 1)} up the video, but no video is "
                "recorded without --video FILE.mp4 (or .gif); add it, or leave "
                f"{'it' if len(given) == 1 else 'them'} out"
            )
    if args.json is not None:  # before the episodes are played, not after
        from rlblocks.contracts import writable_file_problem

        problem = writable_file_problem(args.json)
        if problem is not None:
            raise RlblocksError(f"--json: {problem}")
    agent_mod = importlib.import_module("rlblocks.run")
    agent = agent_mod.load(
        args.run, which=args.which, device=args.device, trust_imports=args.trust_imports
    )
    print(f"{agent}: {args.episodes} episode(s), seed {args.seed}")
    if args.video is not None:
        video: dict[str, Any] = {"episodes": args.video_episodes or 1}
        if args.max_frames is not None:
            video["max_frames"] = args.max_frames
        rec = agent.record(args.video, env=args.env, seed=args.seed, fps=args.fps, **video)
        print(f"video: {args.video} ({rec})")
    game = {"opponent": str(args.opponent)} if args.opponent is not None else None
    try:
        result = agent.evaluate(
            env=args.env, episodes=args.episodes, seed=args.seed, render=args.render,
            backend=args.backend, make_kwargs=game,
        )  # fmt: skip
    except RlblocksError as exc:
        if game is not None and "keyword arguments ['opponent']" in str(exc):
            raise RlblocksError(
                f"--opponent picks the opponent of a two-player game env (games/...); "
                f"{args.env or agent.env_id!r} takes none: leave --opponent out"
            ) from exc
        raise
    print(f"eval: {result}")
    if args.json is not None:
        from rlblocks.run import write_json

        write_json(
            args.json,
            {
                "checkpoint": str(agent.checkpoint),
                "returns": result.returns.tolist(),
                "lengths": result.lengths.tolist(),
                "mean": result.mean,
                "std": result.std,
                **({"outcomes": result.outcomes, **result.outcome_rates}
                   if result.outcomes else {}),
                # a multi-agent run: each agent's return per episode, and their sum
                **({"agent_returns": {k: v.tolist() for k, v in result.agent_returns.items()},
                    "total_returns": result.total_returns.tolist()}
                   if result.agent_returns else {}),
            },
        )
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Plot the test-return curves of one or more runs into a PNG."""
    runs = importlib.import_module("rlblocks.tools")
    group_by = None
    if args.group_by is not None:
        group_by = [f.strip() for f in ",".join(args.group_by).split(",") if f.strip()]
    counts = runs.plot_runs(
        args.runs, args.out, x=args.x, title=args.title, group_by=group_by, label=args.label,
        seeds=args.seeds,
    )
    groups = ", ".join(f"{label} ({n})" for label, n in counts.items())
    # matplotlib adds its default format's suffix to a name without one
    written = args.out if Path(args.out).suffix else f"{args.out}.png"
    print(f"wrote {written}: {groups}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """Search hyperparameters with Optuna; write the best config as TOML."""
    tuning = importlib.import_module("rlblocks.tools")
    _check_budget(args)
    outcome = tuning.tune(
        args.algo,
        env=args.env,
        trials=args.trials,
        max_env_steps=args.max_env_steps,
        max_gradient_steps=args.max_gradient_steps,
        dataset=args.dataset,
        params=list(args.param or ()),
        study_path=args.study,
        out=args.out,
        run_dir=args.run_dir,
        seed=args.seed,
        overrides=list(args.set or ()),
    )
    return 130 if outcome.get("stopped") else 0  # stopped by SIGINT/SIGTERM, as train says


def cmd_describe(args: argparse.Namespace) -> int:
    """Print a run directory's summary (one line per run for a folder of runs), or every
    config field of an algorithm with its value, default and meaning."""
    runs = importlib.import_module("rlblocks.tools")
    import shutil

    width = max(60, min(120, shutil.get_terminal_size((100, 24)).columns - 2))
    target = Path(args.algo)
    is_run = (target / "config.json").is_file()
    # a run directory, a folder of runs, or a path meant as one (an algorithm name has no slash)
    if is_run or "/" in args.algo or "\\" in args.algo:
        if args.env:
            raise RlblocksError(
                "--env applies to an algorithm name; a run directory already names its env"
            )
        if not is_run and target.is_dir():
            print(runs.describe_runs(target, width=width))
        else:
            print(runs.describe_run(target, width=width))
        return 0
    try:
        text = runs.describe_algo(args.algo, env=args.env, width=width)
    except RlblocksError:
        if not target.is_dir():
            raise
        try:
            text = runs.describe_runs(target, width=width)
        except RlblocksError:
            replaced = importlib.import_module("rlblocks.run").replaced_run_note(target)
            raise RlblocksError(
                f"{target} is neither a run directory (no config.json in or below it) nor an "
                "installed algorithm" + (f"; {replaced}" if replaced else "")
            ) from None
    print(text)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every file a run wrote against its checksums; exit 1 when one is damaged."""
    from rlblocks.run import verify_run

    if not (Path(args.run_dir) / "config.json").is_file():
        replaced = importlib.import_module("rlblocks.run").replaced_run_note(args.run_dir)
        raise RlblocksError(
            f"{args.run_dir} is not a run directory: no config.json in it"
            + (f"; {replaced}" if replaced else "")
        )
    problems = verify_run(args.run_dir)
    for problem in problems:
        print(f"damaged: {problem}")
    if not problems:
        print(f"{args.run_dir}: every file matches its checksum")
    # what load, eval and resume refuse on the trust rule (nothing is imported or contacted)
    trust = importlib.import_module("rlblocks.run").trust_problems(
        args.run_dir, trusted=args.trust_imports
    )
    for problem in trust:
        print(f"refused: {problem}")
    return 1 if problems or trust else 0


# -- entry point --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``rlblocks`` argument parser."""
    from rlblocks import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an rlblocks error")

    parser = argparse.ArgumentParser(
        prog="rlblocks",
        description="Deep reinforcement learning for PyTorch, composed from installed plugins.",
    )
    parser.add_argument("--version", action="version", version=f"rlblocks {__version__}")
    parser.add_argument("--debug", action="store_true", default=False,
                        help="show the traceback of an rlblocks error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="list installed algorithms, buffers, "
                       "env backends and loggers")
    p.add_argument("kind", nargs="?", type=_kind, help=f"only this kind: {', '.join(_KINDS)}")
    p.add_argument("--details", action="store_true", help="also show each component's capabilities")
    p.add_argument("--all", action="store_true",
                   help="also list the plugin template's components (a package made to be copied)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("train", parents=[common], help="train an agent")
    p.add_argument("algo", metavar="ALGO", help="algorithm name (see `rlblocks list algo`)")
    p.add_argument("--env", metavar="ID", help="gymnasium env id")
    p.add_argument("--seed", type=_seed, metavar="N", help="random seed")
    p.add_argument("--max-env-steps", type=_env_steps, metavar="N",
                   help="env-step budget (200000 or 2e5; default: the algorithm's for the env); "
                   "with --resume, the continued run's new budget")
    p.add_argument("--max-gradient-steps", type=_gradient_steps, metavar="N",
                   help="offline algorithms: gradient-step budget (1e5; default: the "
                   "algorithm's); with --resume, the continued run's new budget")
    p.add_argument("--dataset", metavar="DATASET",
                   help="offline algorithms, and online ones `rlblocks list algo --details` "
                   "shows 'with a dataset' (gail): the dataset to learn from (buffer.dataset): "
                   "an hdf5 file (ReplayBuffer.save_hdf5, an online run's "
                   "checkpoints/gen-N/buffer.h5, `rlblocks collect`) or a Minari dataset (a "
                   "directory, or an id in the local Minari datasets folder)")
    p.add_argument("--stop-reward", type=float, metavar="R",
                   help="stop when the mean test return reaches R (default: the env's threshold)")
    p.add_argument("--backend", metavar="NAME", help="vector-env backend (see `rlblocks list env`)")
    p.add_argument("--buffer", metavar="NAME", help="replay buffer (see `rlblocks list buffer`)")
    p.add_argument("--num-envs", type=int, metavar="N", help="number of training envs")
    p.add_argument("--logger", action="append", metavar="NAME",
                   help="a logger to add to the default ones (tensorboard, csv); repeat for "
                   "several (see `rlblocks list logger`)")
    p.add_argument("--no-default-loggers", action="store_true",
                   help="leave out the default loggers: only the --logger ones (tests.csv and "
                   "result.json are always written)")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML or JSON config file")
    p.add_argument("--set", action="append", type=_override, metavar="SECTION.FIELD=VALUE",
                   help="override one config field; repeatable")
    p.add_argument("--run-dir", type=_run_dir, metavar="DIR",
                   help="where the run writes its files")
    p.add_argument("--device", metavar="DEV", help="torch device, e.g. cpu or cuda:0")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--plain", action="store_true",
                   help="progress as plain lines (one per test and one per log interval) "
                   "instead of a bar, as when the output is not a terminal")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --run-dir (its checkpoints, logs, result)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir (as `rlblocks resume DIR`)")
    p.add_argument("--continue-solved", action="store_true",
                   help="with --resume: train a solved run on (refused otherwise)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved config as JSON (what --config reads) and exit: "
                   "names, fields, the env and the algorithm's fit to it are checked, nothing "
                   "is trained or written")
    p.add_argument("--seeds", metavar="LIST",
                   help="train once per seed (0-4 or 0,3,7) into RUN_DIR/seed-N and summarise "
                   "the returns (mean, IQM, 95%% bootstrap intervals)")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help="with --seeds: runs at a time in parallel processes (default: cores)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="with --seeds: run the seeds as Ray tasks at ADDRESS ('local': start one)")
    p.add_argument("--init-from", metavar="RUN",
                   help="start from the policy weights of RUN's best.pt (a run of this "
                   "algorithm, or of one whose networks fit: cql for sac); the run takes RUN's "
                   "env unless --env names one (run.init_from records it)")
    p.add_argument("--init-buffer", action="store_true",
                   help="with --init-from: fill the replay buffer with RUN's data (an offline "
                   "run's dataset, an off-policy run's saved replay buffer)")
    p.add_argument("--trust-imports", "--allow-import", action="store_true",
                   help="with --init-from or --resume: trust that run (import the modules its "
                   "config names, which runs their code; as `rlblocks resume --trust-imports`)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("resume", parents=[common], help="continue a run from its last checkpoint")
    p.add_argument("run_dir", type=Path, metavar="DIR", help="the run directory")
    p.add_argument("--max-env-steps", type=_env_steps, metavar="N",
                   help="a new env-step budget for the continued run (200000 or 2e5)")
    p.add_argument("--max-gradient-steps", type=_gradient_steps, metavar="N",
                   help="an offline run: a new gradient-step budget for the continued run")
    p.add_argument("--set", action="append", type=_override, metavar="SECTION.FIELD=VALUE",
                   help="change one field of the saved config, e.g. trainer.max_env_steps=2e5")
    p.add_argument("--device", metavar="DEV",
                   help="continue on this torch device, e.g. cpu for a run trained on a GPU "
                   "(sets run.device; default: the run's own)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--plain", action="store_true",
                   help="progress as plain lines (one per test and one per log interval) "
                   "instead of a bar, as when the output is not a terminal")
    p.add_argument("--continue-solved", action="store_true",
                   help="train a solved run on (to its budget, or until a later test meets the "
                   "stop rule again); a solved run is refused without it")
    p.add_argument("--trust-imports", "--allow-import", action="store_true",
                   help="trust the run: import the code its config names (a module:EnvId env "
                   "id, env wrappers, an encoder; runs that code), write where it says outside "
                   "the run directory and contact the endpoints it names (a tracking server)")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("eval", parents=[common], help="evaluate a trained agent (and record it)")
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory or a checkpoint file")
    p.add_argument("--episodes", type=_positive_int, default=10, metavar="N",
                   help="episodes (default 10)")
    p.add_argument("--which", choices=("best", "latest"), default="best",
                   help="checkpoint of a run directory (default best)")
    p.add_argument("--seed", type=_seed, default=0, metavar="S", help="env seed (default 0)")
    p.add_argument("--render", action="store_true", help="show the env in a window while playing")
    p.add_argument("--video", type=Path, metavar="FILE",
                   help="record episodes to FILE.mp4 or FILE.gif")
    p.add_argument("--video-episodes", type=_positive_int, metavar="N",
                   help="with --video: episodes in the video (default 1)")
    p.add_argument("--fps", type=_positive_int, metavar="N",
                   help="with --video: frame rate (default: the env's)")
    p.add_argument("--max-frames", type=_positive_int, metavar="N",
                   help="with --video: the most frames it holds (default 10000); a longer "
                   "recording is cut, with a warning")
    p.add_argument("--env", metavar="ID",
                   help="play this gymnasium env id instead of the run's own env (needed for a "
                   "run trained on an env factory)")
    p.add_argument("--backend", default="dummy", metavar="NAME", help="vector-env backend")
    p.add_argument("--opponent", metavar="random|RUN",
                   help="two-player games (games/... envs): play against this opponent, "
                   "'random' or a run directory (sets env.make_kwargs.opponent); prints the "
                   "win/draw/loss rates")
    p.add_argument("--device", metavar="DEV", help="torch device (default cpu; auto picks CUDA)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the returns as JSON")
    p.add_argument("--trust-imports", "--allow-import", action="store_true",
                   help="import the code the run's config names (a module:EnvId env id, env "
                   "wrappers, an encoder; runs that code)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("collect", parents=[common],
                       help="record a dataset for offline learning from a run's agent")
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory or a checkpoint file")
    p.add_argument("--episodes", type=_positive_int, metavar="N",
                   help="episodes to record (every mode but replay)")
    p.add_argument("--out", required=True, metavar="DATASET",
                   help="where it goes: a Minari id (name-v0, namespace/name-v0) in the local "
                   "Minari datasets folder, a directory (./name for one that looks like an id), "
                   "or FILE.h5 (rlblocks hdf5)")
    p.add_argument("--mode", choices=("expert", "noisy", "mixture", "replay"), default="expert",
                   help="expert: the agent's test actions; noisy: with --epsilon or --sigma "
                   "noise; mixture: a --random-fraction of the episodes with random actions; "
                   "replay: the run's whole replay buffer from its newest checkpoint "
                   "(default expert)")
    p.add_argument("--epsilon", type=float, metavar="E",
                   help="noisy, discrete actions: probability of a random action (default 0.1)")
    p.add_argument("--sigma", type=float, metavar="S",
                   help="noisy, Box actions: standard deviation of Gaussian noise in units of "
                   "half the action range (default 0.1)")
    p.add_argument("--random-fraction", type=float, metavar="F",
                   help="mixture: the fraction of episodes played with random actions "
                   "(default 0.5)")
    p.add_argument("--format", choices=("minari", "hdf5"),
                   help="minari or rlblocks hdf5 (default: hdf5 for an .h5 name, else minari "
                   "when it is installed)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="episode k plays env seed S+k; the noise draws from S too (default 0)")
    p.add_argument("--max-steps-per-episode", type=_positive_int, metavar="N",
                   help="end an episode (truncated) after N steps (default: the env's time "
                   "limit; an env without one needs this)")
    p.add_argument("--which", choices=("best", "latest"), default="best",
                   help="checkpoint of a run directory (default best)")
    p.add_argument("--device", metavar="DEV", help="torch device (default cpu)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset")
    p.add_argument("--trust-imports", "--allow-import", action="store_true",
                   help="import the modules the run's config names (runs their code)")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("plot", parents=[common], help="plot test-return curves of runs")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                   help="run directories, or folders holding some (every run below them)")
    p.add_argument("-o", "--out", type=Path, default=Path("runs.png"), metavar="FILE",
                   help="the image to write, its format by its suffix: .png, .pdf, .svg... "
                   "(default runs.png)")
    p.add_argument("--x", choices=("env_steps", "wall_seconds"), default="env_steps",
                   help="horizontal axis (default env_steps)")
    p.add_argument("--title", metavar="TEXT", help="plot title")
    p.add_argument("--group-by", action="append", metavar="FIELD[,FIELD]",
                   help="one curve per algorithm and value of these config fields (algo.lr, "
                   "trainer.batch_size...); default: the fields that differ between an "
                   "algorithm's runs on an env, seeds, paths, budgets and test schedules left out")
    p.add_argument("--label", metavar="TEMPLATE",
                   help="name each curve: {algo}, {env} and {SECTION.FIELD} placeholders, e.g. "
                   "'{algo} lr={algo.lr}'")
    p.add_argument("--seeds", action="store_true",
                   help="runs of one curve are seeds: draw their interquartile mean with a 95%% "
                   "stratified-bootstrap band (warns under 5 seeds); e.g. `rlblocks plot "
                   "--seeds RUN_DIR` of a `train --seeds` folder")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("tune", parents=[common], help="search hyperparameters with Optuna")
    p.add_argument("algo", metavar="ALGO", help="algorithm name (see `rlblocks list algo`)")
    p.add_argument("--env", metavar="ID", help="gymnasium env id")
    p.add_argument("--trials", type=_positive_int, default=20, metavar="N",
                   help="trials to run (default 20)")
    p.add_argument("--max-env-steps", type=_env_steps, metavar="N",
                   help="env-step budget per trial (200000 or 2e5)")
    p.add_argument("--max-gradient-steps", type=_gradient_steps, metavar="N",
                   help="offline algorithms: gradient-step budget per trial (1e5; default: the "
                   "algorithm's)")
    p.add_argument("--dataset", metavar="DATASET",
                   help="offline algorithms (and online ones 'with a dataset'): the dataset "
                   "every trial learns from (buffer.dataset): an hdf5 file or a Minari dataset, "
                   "as for `rlblocks train --dataset`")
    p.add_argument("--param", action="append", metavar="SECTION.FIELD=DIST",
                   help="a searched field: loguniform:LO:HI, uniform:LO:HI, int:LO:HI or "
                   "choice:A|B; repeatable (default: learning rates, gamma, n_step, batch size, "
                   "hidden sizes)")
    p.add_argument("--set", action="append", type=_override, metavar="SECTION.FIELD=VALUE",
                   help="a fixed setting for every trial; repeatable")
    p.add_argument("--study", type=Path, metavar="FILE.db",
                   help="SQLite study file; running again continues it (default RUN_DIR/study.db)")
    p.add_argument("-o", "--out", type=Path, metavar="FILE.toml",
                   help="where the best config goes (default RUN_DIR/best.toml)")
    p.add_argument("--run-dir", type=_run_dir, metavar="DIR", help="where the trials' runs go")
    p.add_argument("--seed", type=_seed, default=0, metavar="N",
                   help="seed of every trial and of the sampler (default 0)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("describe", parents=[common],
                       help="a run directory (what ran, where it stands, its tests, checkpoints "
                            "and changed settings), or every config field of an algorithm: "
                            "value, default, meaning")
    p.add_argument("algo", metavar="ALGO_OR_RUN_DIR",
                   help="algorithm name (see `rlblocks list algo`), run directory, or a "
                        "folder of runs (one line each)")
    p.add_argument("--env", metavar="ID",
                   help="with an algorithm: show the values a run on this env gets")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("verify", parents=[common],
                       help="check every file of a run directory against its checksums")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--trust-imports", "--allow-import", action="store_true",
                   help="trust the run: do not report the code, outside paths and endpoints "
                   "its config names (as load, eval and resume with --trust-imports)")
    p.set_defaults(func=cmd_verify)
    return parser


#: errno values of files the system refuses to read or write (not a bug of rlblocks)
_FILE_ERRNOS = {
    errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOENT,
    errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EDQUOT, errno.EIO, errno.EFBIG,
}


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """A warning as the command line prints it: ``warning: ...`` (``--debug`` shows Python's
    form, with the file and line that warned)."""
    print(f"warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def _plain(args: argparse.Namespace) -> Iterator[None]:
    """``--plain``: progress as plain lines even on a terminal (``RLBLOCKS_PLAIN=1`` while the
    command runs, which its seed workers inherit)."""
    if not getattr(args, "plain", False):
        yield
        return
    name = "RLBLOCKS_PLAIN"  # what the console reporter reads (trainers' PLAIN_VARIABLE)
    old = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlblocks`` command; rlblocks errors print as ``error: ...`` and return 2,
    warnings as ``warning: ...``."""
    args = build_parser().parse_args(argv)
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        with warnings.catch_warnings(), command_line(args.command, argv), _plain(args):
            if not args.debug:
                warnings.showwarning = _show_warning
            return args.func(args)
    except RlblocksError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`rlblocks list | head`): stop quietly, as Unix tools do; stdout
        # goes to devnull so the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        # a file the command reads or writes, refused by the system (a full disk, a read-only
        # file system, a missing permission): said in one line, as rlblocks' own errors are
        if args.debug or (exc.filename is None and exc.errno not in _FILE_ERRNOS):
            raise
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot use{where}: {exc.strerror or exc} (--debug shows where)",
              file=sys.stderr)  # fmt: skip
        return 2


if __name__ == "__main__":
    sys.exit(main())
