"""Core's own terminal reporter: a progress bar during the run and a short summary at the end.

A hook implementation like any logger plugin (pytest's terminal reporter is the model).
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
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


#: the training return on the progress line is the mean of this many latest training episodes
RECENT_EPISODES = 20
#: the threshold trend is fitted to this many latest tests (full and screened)
TREND_TESTS = 5
#: ``RLBLOCKS_PLAIN=1`` (what ``--plain`` sets): plain lines even on a terminal
PLAIN_VARIABLE = "RLBLOCKS_PLAIN"
#: the update statistics that count as a run's main loss, in order of preference (then the
#: first ``loss/...`` key in name order)
MAIN_LOSSES = ("loss", "loss/critic", "loss/clip", "loss/td", "loss/value")


def main_loss(stats: Mapping[str, Any]) -> tuple[str, float] | None:
    """``(name, value)`` of the loss the progress line shows from one log interval's update
    statistics: ``loss`` when the algorithm reports one, else its critic's (actor-critic
    algorithms: the actor's loss is minus a Q value, which says little), else the first
    ``loss/...``; None when there is none."""
    for key in (*MAIN_LOSSES, *sorted(k for k in stats if str(k).startswith("loss/"))):
        value = stats.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return key, float(value)
    return None


def threshold_trend(
    points: Sequence[tuple[float, float]], stop_reward: float | None, budget: float
) -> float | None:
    """Where the test-return trend reaches ``stop_reward``: a least-squares line through the
    latest :data:`TREND_TESTS` ``(progress, test return)`` points, extrapolated; None when it
    cannot say (fewer than 3 tests, no stop reward, a flat or falling trend, the line already
    past the threshold, or a crossing beyond ``budget``). A rough guide, labelled as a trend:
    learning curves are not straight lines."""
    pts = [(float(x), float(y)) for x, y in points[-TREND_TESTS:] if math.isfinite(y)]
    if stop_reward is None or len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    if slope <= 0:
        return None
    last_x = pts[-1][0]
    at_last = my + slope * (last_x - mx)
    if at_last >= stop_reward:
        return None
    cross = last_x + (stop_reward - at_last) / slope
    return cross if cross <= budget else None


def fmt_seconds(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _python_name(qualified: str, placeholder: str) -> str:
    """The name to write in a printed Python line for the callable ``module:qualname``: its
    name when that is one (``make_env``), else ``placeholder`` (a lambda, a nested function)."""
    _module, _, qualname = str(qualified).rpartition(":")
    return qualname if qualname.isidentifier() else placeholder


def continue_line(
    run_dir: Path,
    *,
    env_factory: str | None = None,
    networks: Mapping[str, str] | None = None,
    budget_flag: str = "",
) -> str:
    """How to continue the run in ``run_dir``: a shell command (the path shell-quoted) or, for
    a run that needs its env factory or networks from Python, a Python line naming them (a
    placeholder such as ``make_env`` where the callable had no name, with a note saying what
    to pass). ``budget_flag`` (``--max-env-steps 50000``) gives a finished run a larger budget."""
    if env_factory is None and not networks:
        return " ".join(["rlblocks resume", shlex.quote(str(run_dir)), budget_flag]).rstrip()
    args = [repr(str(run_dir))]
    notes = []
    if env_factory is not None:
        name = _python_name(env_factory, "make_env")
        args.append(f"env={name}")
        notes.append(f"{name}: the env factory the run trained with ({env_factory})")
    if networks:
        parts = []
        for part, where in networks.items():
            name = _python_name(where, f"{part}_net")
            parts.append(f"{part!r}: {name}")
            notes.append(f"{name}: the {part} network it trained with ({where})")
        args.append("networks={" + ", ".join(parts) + "}")
    if budget_flag:
        flag, _, value = budget_flag.partition(" ")
        field = flag.lstrip("-").replace("-", "_")
        args.append(f"overrides=['trainer.{field}={value}']")
    return f"rlblocks.resume({', '.join(args)})  # {'; '.join(notes)}"


class ConsoleReporter:
    """Shows the progress (env steps; gradient steps offline), the recent training return, the
    main loss, the last test return and the time left; prints where the logs are at the end.

    On a terminal: a progress bar. When the stream is not a terminal (CI logs, ``nohup``,
    ``| tee``), with ``plain=True`` or ``RLBLOCKS_PLAIN=1`` (``--plain``): one line per test and
    one per log interval (``trainer.log_interval``) instead of bar redraws.

    The bar's ETA is the time to spend the whole budget (labelled ``budget``); once three tests
    trend upwards towards ``stop_reward``, ``trend`` adds where a straight line through the
    latest tests crosses it (a rough guide: the run stops at the first test that reaches it).
    """

    def __init__(
        self,
        total_env_steps: int,
        progress: bool = True,
        stream: Any = None,
        env_factory: str | None = None,
        unit: str = "env step",
        networks: Mapping[str, str] | None = None,
        plain: bool | None = None,
    ) -> None:
        self.total = total_env_steps
        #: what the budget counts: "env step", "agent step" (a multi-agent run with
        #: ``trainer.count_steps_by=agent_steps``), or "gradient step" for offline runs (the bar
        #: then moves with the updates, as no env step is taken)
        self.unit = unit
        self.progress = progress
        #: ``module:qualname`` of the env factory the run trains with (train(env=callable))
        self.env_factory = env_factory
        #: ``{part: "module:qualname"}`` of the networks the run got from Python (``run.networks``)
        self.networks = dict(networks or {})
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        if plain is None:
            plain = os.environ.get(PLAIN_VARIABLE, "") not in ("", "0") or not (
                callable(isatty) and isatty()
            )
        self.lines = bool(progress) and bool(plain)
        self._bar: Any = None
        self._last = 0
        self._postfix: dict[str, str] = {}
        #: ``{name: logger object}`` of the run's loggers (set by the run that builds them): the
        #: summary names each with where its data went (its ``where()``, when it has one)
        self.loggers: dict[str, Any] = {}
        self._returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self._loss: tuple[str, float] | None = None
        self._tests: list[tuple[float, float]] = []
        self._stop_reward: float | None = None
        self._next_line = 0
        self._first: tuple[int, float] | None = None

    # -- what the line says ---------------------------------------------------------------
    def telemetry(self) -> list[str]:
        """The recent training return and the main loss, as the line shows them."""
        parts = []
        if self._returns:
            mean = sum(self._returns) / len(self._returns)
            parts.append(f"train return {mean:.1f} (last {len(self._returns)} episodes)")
        if self._loss is not None:
            parts.append(f"{self._loss[0]} {self._loss[1]:.4g}")
        return parts

    def _seen(self, progress: int) -> None:
        """Speeds count from the first progress report (a resumed run starts part-way)."""
        if self._first is None:
            self._first = (progress, time.perf_counter())

    def _rate(self, progress: int) -> float:
        if self._first is None:
            return 0.0
        start, at = self._first
        seconds, done = time.perf_counter() - at, progress - start
        return done / seconds if seconds > 0 and done > 0 else 0.0

    def timing(self, progress: int) -> list[str]:
        """Speed, the time left on the budget, and the trend's crossing of stop_reward."""
        rate = self._rate(progress)
        if rate <= 0:
            return []
        unit = f"{self.unit}s/s"  # env, agent (a multi-agent run's budget) or gradient steps
        parts = [f"{rate:,.0f} {unit}", f"budget ETA {fmt_seconds((self.total - progress) / rate)}"]
        cross = threshold_trend(self._tests, self._stop_reward, self.total)
        if cross is not None:
            parts.append(
                f"test trend reaches {self._stop_reward:g} near {self.unit} {cross:,.0f} "
                f"(~{fmt_seconds(max(0.0, cross - progress) / rate)})"
            )
        return parts

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _progress_line(self, progress: int) -> None:
        """The plain line of a log interval."""
        parts = self.telemetry() + self.timing(progress)
        self._print(
            f"{self.unit} {progress:,}/{self.total:,}: " + (", ".join(parts) or "no episode yet")
        )

    def _refresh_postfix(self, progress: int) -> None:
        if self._bar is None:
            return
        if self._returns:
            self._postfix["train"] = f"{sum(self._returns) / len(self._returns):.1f}"
        if self._loss is not None:
            self._postfix[self._loss[0]] = f"{self._loss[1]:.3g}"
        cross = threshold_trend(self._tests, self._stop_reward, self.total)
        rate = self._rate(progress)
        if cross is not None and rate > 0:
            self._postfix["trend"] = fmt_seconds(max(0.0, cross - progress) / rate)
        else:
            self._postfix.pop("trend", None)
        self._bar.set_postfix(self._postfix, refresh=False)

    def _maybe_line(self, progress: int, trainer: Any) -> None:
        if not self.lines or progress < self._next_line:
            return
        interval = max(1, int(getattr(trainer, "log_interval", 0) or 1000))
        while self._next_line <= progress:
            self._next_line += interval
        self._progress_line(progress)

    # -- hooks ----------------------------------------------------------------------------
    @hookimpl
    def rlblocks_run_start(self, config: dict, run_dir: Path | None, resumed: bool) -> None:
        stop = (config.get("trainer") or {}).get("stop_reward")
        self._stop_reward = float(stop) if isinstance(stop, int | float) else None
        if not self.progress:
            return
        if self.lines:
            algo = config.get("algo_name", "?")
            env = config.get("env", {}).get("id", "?")
            what = "resuming" if resumed else "training"
            self._print(f"{what} {algo} on {env} for {self.total:,} {self.unit}s")
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
            # the ETA is the whole budget's: a run that reaches stop_reward ends sooner
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
            "[{elapsed}<{remaining} budget, {rate_fmt}{postfix}]",
        )

    @hookimpl
    def rlblocks_episodes_end(self, returns: Any, env_step: int, namespace: str) -> None:
        if namespace != "train":
            return
        import numpy as np

        arr = np.asarray(returns, dtype=np.float64)
        self._returns.extend(float(r) for r in arr.reshape(len(arr), -1).sum(axis=1))

    @hookimpl
    def rlblocks_rollout_end(self, stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
        if self.unit == "gradient step":
            return
        self._seen(env_step)
        if self._bar is not None:
            self._bar.update(env_step - self._last)
            self._refresh_postfix(env_step)
        self._last = env_step
        self._maybe_line(env_step, trainer)

    @hookimpl
    def rlblocks_update_end(
        self, stats: Mapping[str, Any], gradient_step: int, trainer: Any
    ) -> None:
        self._loss = main_loss(stats) or self._loss
        if self.unit != "gradient step":
            return
        self._seen(gradient_step)
        if self._bar is not None:
            self._bar.update(gradient_step - self._last)
            self._refresh_postfix(gradient_step)
        self._last = gradient_step
        self._maybe_line(gradient_step, trainer)

    @hookimpl
    def rlblocks_test_end(self, stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
        step = int(trainer.progress) if self.unit == "gradient step" else env_step
        mean, std = stats.get("return_mean", math.nan), stats.get("return_std", math.nan)
        screened = bool(stats.get("screened", False))
        if math.isfinite(mean):
            self._tests.append((step, float(mean)))
        if self._bar is not None and self.unit == "gradient step":
            self._bar.update(step - self._last)
            self._last = step
        if self.lines:
            what = "screened test" if screened else "test"
            episodes = int(stats.get("n_episode", 0) or 0)
            note = (
                f"; below stop_reward {self._stop_reward:g} by a clear margin, so the full test "
                "was skipped" if screened and self._stop_reward is not None else ""
            )
            parts = self.timing(step)
            best = stats.get("best_return", math.nan)
            best_text = f"best {best:.1f}" if math.isfinite(best) else "no full test yet"
            games = ""
            if "win_rate" in stats:  # a two-player game: the learner's outcomes
                games = (
                    f", win {stats['win_rate']:.0%} draw {stats.get('draw_rate', 0):.0%} "
                    f"loss {stats.get('loss_rate', 0):.0%}"
                )
            self._print(
                f"{self.unit} {step:,}/{self.total:,}{_other_count(trainer, self.unit)}: "
                f"{what} return {mean:.1f} +- {std:.1f} "
                f"over {episodes} episodes ({best_text}){games}{note}"
                + (f"; {', '.join(parts)}" if parts else "")
            )
        if self._bar is not None:
            self._postfix["test"] = f"{mean:.1f}" + ("s" if screened else "")
            best = stats.get("best_return", math.nan)
            if math.isfinite(best):
                self._postfix["best"] = f"{best:.1f}"
            if "win_rate" in stats:
                self._postfix["win"] = f"{stats['win_rate']:.0%}"
            self._refresh_postfix(step)

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        best = result.get("best_test_return")
        solved = bool(result.get("solved"))
        lines = [
            f"{'solved' if solved else 'stopped'}: {result.get('stop_reason', '')}",
            f"  {'no full test yet' if best is None else f'best test return {round(best, 2)}'}, "
            f"{result.get('env_steps')} env steps, "
            + (f"{result['agent_steps']} agent steps, " if result.get("agent_steps") is not None
               else "")
            + f"{result.get('gradient_steps')} gradient steps, "
            f"{result.get('wall_seconds', 0.0):.1f} s",
        ]
        split = time_split(result)
        if split is not None:
            lines.append(f"  {split}")
        if run_dir is not None:
            lines.append(f"  run directory: {run_dir} (config.json, result.json, checkpoints/)")
            lines.extend(self._logger_lines(Path(run_dir)))
            if not solved:  # a solved run is done (resume refuses it without --continue-solved)
                lines.append("  continue it: " + continue_line(
                    Path(run_dir), env_factory=self.env_factory, networks=self.networks,
                    budget_flag=self._budget_flag(result),
                ))  # fmt: skip
        print("\n".join(lines), file=self.stream)

    def _budget_flag(self, result: Mapping[str, Any]) -> str:
        """A larger budget for a run that spent its own (resume refuses it without one)."""
        offline = self.unit == "gradient step"
        counter = "gradient_steps" if offline else f"{self.unit.replace(' ', '_')}s"
        done = int(result.get(counter) or 0)
        if self.total <= 0 or done < self.total:
            return ""
        flag = "--max-gradient-steps" if offline else "--max-env-steps"
        return f"{flag} {max(2 * done, done + 1)}"

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


def _other_count(trainer: Any, unit: str) -> str:
    """A multi-agent run's other step count beside its progress: `` (N env steps)`` when the
    progress counts agent steps, `` (N agent steps)`` when it counts env steps; empty for
    single-agent and offline runs, which count one kind of step."""
    st = getattr(trainer, "state", None)
    agent_steps = getattr(st, "agent_steps", None)
    if agent_steps is None or unit == "gradient step":
        return ""
    if unit == "agent step":
        return f" ({int(getattr(trainer, 'env_steps', 0)):,} env steps)"
    return f" ({int(agent_steps):,} agent steps)"
