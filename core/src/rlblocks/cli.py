"""The ``rlblocks`` command: list installed components, train an agent, resume a run.

Module-level imports stay light: ``rlblocks list`` must work without importing torch or numpy, so
the training machinery is imported inside the commands that need it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlblocks.errors import RlblocksError

_KINDS = ("algo", "buffer", "env", "logger")


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
    """Print every installed component, one per row; broken plugins are marked, not fatal."""
    from rlblocks.plugins.registry import get_registry

    kinds = [args.kind] if args.kind else list(_KINDS)
    rows: list[tuple[str, str, str, str, str]] = []
    details: list[dict[str, Any] | None] = []
    broken = 0
    names_seen: dict[tuple[str, str], list[str]] = {}
    for kind in kinds:
        registry = get_registry(kind)
        for entry in registry.entries():
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
        print(f"no {what} installed; plugins are pip packages such as rlblocks-algo-ppo")
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


def cmd_train(args: argparse.Namespace) -> int:
    """Train ``args.algo``; 0 when the run finished, solved or not."""
    experiment = importlib.import_module("rlblocks.experiment")
    experiment.train(
        args.algo,
        env=args.env,
        seed=args.seed,
        stop_reward=args.stop_reward,
        backend=args.backend,
        buffer=args.buffer,
        num_envs=args.num_envs,
        loggers=args.logger,
        config=args.config,
        overrides=list(args.set or ()),
        run_dir=args.run_dir,
        device=args.device,
        progress=False if args.no_progress else None,
    )
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue the run in ``args.run_dir`` from its last checkpoint."""
    experiment = importlib.import_module("rlblocks.experiment")
    experiment.resume(args.run_dir, overrides=list(args.set or ()))
    return 0


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
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("train", parents=[common], help="train an agent")
    p.add_argument("algo", metavar="ALGO", help="algorithm name (see `rlblocks list algo`)")
    p.add_argument("--env", metavar="ID", help="gymnasium env id")
    p.add_argument("--seed", type=int, metavar="N", help="random seed")
    p.add_argument("--stop-reward", type=float, metavar="R",
                   help="stop when the mean test return reaches R (default: the env's threshold)")
    p.add_argument("--backend", metavar="NAME", help="vector-env backend (see `rlblocks list env`)")
    p.add_argument("--buffer", metavar="NAME", help="replay buffer (see `rlblocks list buffer`)")
    p.add_argument("--num-envs", type=int, metavar="N", help="number of training envs")
    p.add_argument("--logger", action="append", metavar="NAME",
                   help="a logger to use; repeat for several (see `rlblocks list logger`)")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML or JSON config file")
    p.add_argument("--set", action="append", type=_override, metavar="SECTION.FIELD=VALUE",
                   help="override one config field; repeatable")
    p.add_argument("--run-dir", type=Path, metavar="DIR", help="where the run writes its files")
    p.add_argument("--device", metavar="DEV", help="torch device, e.g. cpu or cuda:0")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("resume", parents=[common], help="continue a run from its last checkpoint")
    p.add_argument("run_dir", type=Path, metavar="DIR", help="the run directory")
    p.add_argument("--set", action="append", type=_override, metavar="SECTION.FIELD=VALUE",
                   help="change one field of the saved config, e.g. trainer.max_env_steps=2e5")
    p.set_defaults(func=cmd_resume)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlblocks`` command; rlblocks errors print as ``error: ...`` and return 2."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RlblocksError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
