"""Core's own terminal reporter: a progress bar during the run and a short summary at the end.

A hook implementation like any logger plugin (pytest's terminal reporter is the model).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlblocks.plugins import hookimpl


def time_split(result: Mapping[str, Any]) -> str | None:
    """Where a run's wall time went, in one line (``result.json``'s ``collect_seconds``,
    ``update_seconds``, ``test_seconds`` and speeds; phases that never ran are left out), or
    None for a result that has no split (written before it existed)."""
    phases = (
        ("collect", "collect_seconds", "collect_speed", "env steps/s"),
        ("update", "update_seconds", "update_speed", "gradient steps/s"),
        ("test", "test_seconds", "test_speed", "env steps/s"),
    )
    if not any(isinstance(result.get(key), int | float) for _, key, _, _ in phases):
        return None
    parts, timed = [], 0.0
    for name, key, speed_key, unit in phases:
        seconds = float(result.get(key) or 0.0)
        timed += seconds
        if seconds > 0:
            speed = float(result.get(speed_key) or 0.0)
            parts.append(f"{name} {seconds:.1f} s ({speed:,.0f} {unit})")
    other = max(0.0, float(result.get("wall_seconds") or 0.0) - timed)
    return "time: " + ", ".join([*parts, f"other {other:.1f} s"])


class ConsoleReporter:
    """Shows the progress (env steps; gradient steps offline), the last test return and speed;
    prints where the logs are at the end.

    On a terminal: a progress bar with the latest and best test return. When the stream is not a
    terminal (CI logs, ``nohup``, ``| tee``): one plain line per test instead of bar redraws.
    """

    def __init__(
        self,
        total_env_steps: int,
        progress: bool = True,
        stream: Any = None,
        env_factory: str | None = None,
        unit: str = "env step",
        networks: Mapping[str, str] | None = None,
    ) -> None:
        self.total = total_env_steps
        #: what the budget counts: "env step", or "gradient step" for offline runs (the bar then
        #: moves with the updates, as no env step is taken)
        self.unit = unit
        self.progress = progress
        #: ``module:qualname`` of the env factory the run trains with (train(env=callable))
        self.env_factory = env_factory
        #: ``{part: "module:qualname"}`` of the networks the run got from Python (``run.networks``)
        self.networks = dict(networks or {})
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.lines = bool(progress) and not (callable(isatty) and isatty())
        self._bar: Any = None
        self._last = 0
        self._postfix: dict[str, str] = {}
        #: ``{name: logger object}`` of the run's loggers (set by the run that builds them): the
        #: summary names each with where its data went (its ``where()``, when it has one)
        self.loggers: dict[str, Any] = {}

    @hookimpl
    def rlblocks_run_start(self, config: dict, run_dir: Path | None, resumed: bool) -> None:
        if not self.progress:
            return
        if self.lines:
            algo = config.get("algo_name", "?")
            env = config.get("env", {}).get("id", "?")
            what = "resuming" if resumed else "training"
            print(f"{what} {algo} on {env} for {self.total:,} {self.unit}s", file=self.stream)
            return
        from tqdm.auto import tqdm

        self._bar = tqdm(
            total=self.total,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            file=self.stream,
            desc="resumed" if resumed else "training",
            mininterval=0.5,
        )

    @hookimpl
    def rlblocks_rollout_end(self, stats: Mapping[str, Any], env_step: int) -> None:
        if self._bar is not None and self.unit == "env step":
            self._bar.update(env_step - self._last)
            self._last = env_step

    @hookimpl
    def rlblocks_update_end(self, gradient_step: int) -> None:
        if self._bar is not None and self.unit == "gradient step":
            self._bar.update(gradient_step - self._last)
            self._last = gradient_step

    @hookimpl
    def rlblocks_test_end(self, stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
        if self._bar is not None and self.unit == "gradient step":
            self._bar.update(int(trainer.progress) - self._last)
            self._last = int(trainer.progress)
        if self.lines:
            mean, std = stats.get("return_mean", math.nan), stats.get("return_std", math.nan)
            step = int(trainer.progress) if self.unit == "gradient step" else env_step
            games = ""
            if "win_rate" in stats:  # a two-player game: the learner's outcomes
                games = (
                    f", win {stats['win_rate']:.0%} draw {stats.get('draw_rate', 0):.0%} "
                    f"loss {stats.get('loss_rate', 0):.0%}"
                )
            print(
                f"{self.unit} {step:,}/{self.total:,}: test return {mean:.1f} +- {std:.1f} "
                f"(best {stats.get('best_return', math.nan):.1f}){games}",
                file=self.stream,
                flush=True,
            )
        if self._bar is not None:
            self._postfix["test"] = f"{stats.get('return_mean', math.nan):.1f}"
            self._postfix["best"] = f"{stats.get('best_return', math.nan):.1f}"
            if "win_rate" in stats:
                self._postfix["win"] = f"{stats['win_rate']:.0%}"
            self._bar.set_postfix(self._postfix, refresh=False)

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        best = result.get("best_test_return")
        lines = [
            f"{'solved' if result.get('solved') else 'stopped'}: {result.get('stop_reason', '')}",
            f"  {'no full test yet' if best is None else f'best test return {round(best, 2)}'}, "
            f"{result.get('env_steps')} env steps, {result.get('gradient_steps')} gradient steps, "
            f"{result.get('wall_seconds', 0.0):.1f} s",
        ]
        split = time_split(result)
        if split is not None:
            lines.append(f"  {split}")
        if run_dir is not None:
            lines.append(f"  run directory: {run_dir} (config.json, result.json, checkpoints/)")
            lines.extend(self._logger_lines(Path(run_dir)))
            if self.env_factory is None and not self.networks:
                lines.append(f"  continue it: rlblocks resume {run_dir}")
            else:  # the factory and networks are not in the run directory: Python passes them
                again = [f"env={self.env_factory}"] if self.env_factory is not None else []
                if self.networks:
                    parts = ", ".join(f"{k!r}: {v}" for k, v in self.networks.items())
                    again.append(f"networks={{{parts}}}")
                lines.append(
                    f"  continue it: rlblocks.resume({str(run_dir)!r}, {', '.join(again)})"
                )
        print("\n".join(lines), file=self.stream)

    def _logger_lines(self, run_dir: Path) -> list[str]:
        """One line per logger: its name and where its data went (a path, a URL, a project)."""
        lines = []
        for name, logger in self.loggers.items():
            where = None
            describe = getattr(logger, "where", None)
            if callable(describe):
                try:
                    where = describe()
                except Exception as exc:  # a summary line must not fail the finished run
                    where = f"(its where() failed: {type(exc).__name__})"
            fallback = f"its files, if any, are in {run_dir / 'logs'}"
            lines.append(f"  logger {name}: {where or fallback}")
        return lines
