"""Reading runs back for people: learning-curve plots over several runs, and readable
descriptions of a run directory and of an algorithm's config (``rlblocks plot`` and
``rlblocks describe``)."""

from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import json
import math
import os
import string
import textwrap
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from rlblocks.contracts import CheckpointError, ConfigError, writable_file_problem
from rlblocks.run import (
    DISCARDED_PREFIX,
    REPLACED_DIR,
    RESULT_FILE,
    TESTS_FILE,
    GenerationStore,
    RunDirLock,
    atomic_write,
    check_file,
    option,
    read_result,
    read_tests,
    replaced_run_note,
    run_label,
)
from rlblocks.tools._stats import few_seeds_note, nan_iqm, stratified_bootstrap
from rlblocks.trainers import continue_line, time_split


def find_runs(
    paths: Sequence[str | os.PathLike[str]], set_aside: list[Path] | None = None
) -> list[tuple[Path, bool]]:
    """The run directories that ``paths`` name, each once, in order, with whether it was named
    itself: a run directory (it holds a ``config.json``) stands for itself, any other folder for
    every run directory below it (sorted; a run's own folders are not searched), so
    ``rlblocks plot runs`` plots every run under ``runs/``. A ``.replaced-run`` folder (a run an
    interrupted ``--overwrite`` set aside) is no run: it is not searched, and goes into
    ``set_aside`` when that list is given."""
    found: dict[Path, tuple[Path, bool]] = {}  # keyed by the resolved path: a run counts once
    for p in map(Path, paths):
        if (p / "config.json").is_file():
            found[p.resolve()] = (p, True)
            continue
        if not p.is_dir():
            what = "a file, not a run directory" if p.exists() else "no such run directory"
            raise CheckpointError(f"{p}: {what}")
        below, aside = [], []
        for root, dirs, files in os.walk(p):
            if REPLACED_DIR in dirs:
                aside.append(Path(root) / REPLACED_DIR)
                dirs.remove(REPLACED_DIR)
            dirs[:] = [d for d in dirs if not d.startswith(DISCARDED_PREFIX)]  # being deleted
            if "config.json" in files:
                below.append(Path(root))
                dirs.clear()
            dirs.sort()
        if set_aside is not None:
            set_aside += [a for a in sorted(aside) if a not in set_aside]
        if not below:
            notes = [n for n in (replaced_run_note(a.parent) for a in sorted(aside)) if n]
            if notes:  # only a run set aside: what to do with it is the advice
                raise CheckpointError(
                    f"{p} holds no run (no config.json in or below it); " + "; ".join(notes)
                )
            raise CheckpointError(
                f"{p} is not a run directory (no config.json) and holds none; name the "
                "directories that `rlblocks train` wrote (each has a config.json)"
            )
        for run in sorted(below):
            found.setdefault(run.resolve(), (run, False))
    return list(found.values())


def bootstrap_band(
    curves: np.ndarray, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs (axis 0) and a percentile-bootstrap confidence band of that mean at
    every point (runs resampled with replacement). NaN marks a run without a value at a point
    (before its first test): the mean there is over the runs that have one."""
    import warnings

    curves = np.asarray(curves, dtype=np.float64)
    with warnings.catch_warnings():  # a point no (resampled) run has a value at stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(curves, axis=0)
        n = curves.shape[0]
        if n < 2:
            return mean, mean.copy(), mean.copy()
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(resamples, n))
        means = np.nanmean(curves[idx], axis=1)
        lo = np.nanpercentile(means, 100 * (1 - confidence) / 2, axis=0)
        hi = np.nanpercentile(means, 100 * (1 + confidence) / 2, axis=0)
    return mean, lo, hi


#: Config fields that do not change what a run learns (where it writes, how often it tests or
#: saves, its budget, its seed): left out when runs are grouped by the fields that differ.
_NOT_GROUPED = (
    "run.seed", "run.device", "run.loggers", "run.logger_options", "run.run_dir",
    "run.progress", "run.torch_threads", "run.save_buffer", "run.flush_denormals",
    "trainer.max_env_steps", "trainer.max_gradient_steps", "trainer.checkpoint_interval",
    "trainer.log_interval", "trainer.test_interval", "trainer.test_episodes",
    "trainer.test_screen_episodes", "trainer.stop_reward", "trainer.test_at_start",
    "env.num_test_envs", "env.backend", "env.worker_timeout", "buffer.path", "buffer.storage",
)  # fmt: skip


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"lr": 1e-3}}`` -> ``{"algo.lr": 1e-3}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


class _Section(str):
    """A config section in a ``--label`` template: ``{algo}`` is the algorithm's name (``{env}``
    the env id, other sections nothing) and ``{algo.lr}`` one of its fields."""

    fields: dict[str, Any]

    def __new__(cls, text: str, fields: dict[str, Any]) -> _Section:
        obj = super().__new__(cls, text)
        obj.fields = fields
        return obj

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.fields.get(name, "n/a")  # a field this run's config lacks (an older run)


@attrs.define
class _PlotRun:
    path: Path
    algo: str
    env: str
    config: dict[str, Any]  # flattened: "algo.lr" -> value
    rows: list[dict[str, float]]


def _read_plot_runs(run_dirs: Sequence[str | os.PathLike[str]]) -> list[_PlotRun]:
    """The runs ``run_dirs`` name that have a finished test, with their configs; runs found in
    a folder that cannot be read (or have no test yet) are left out with a warning, runs named
    themselves raise."""
    runs: list[_PlotRun] = []
    skipped, unreadable = [], []
    set_aside: list[Path] = []
    for rd, named in find_runs(run_dirs, set_aside):
        if not named and not (rd / TESTS_FILE).is_file():
            skipped.append(str(rd))  # found in a folder, e.g. a run that is still warming up
            continue
        try:
            algo, env = run_label(rd)
            rows = read_tests(rd)
            config = json.loads((rd / "config.json").read_text(encoding="utf-8"))
        except (CheckpointError, OSError, ValueError) as exc:
            if named:  # asked for by name: the user must hear why it cannot be plotted
                raise
            unreadable.append(str(exc))  # found in a folder: plot the others, say which
            continue
        if rows:
            flat = _flatten(config) if isinstance(config, Mapping) else {}
            runs.append(_PlotRun(rd, algo, env, flat, rows))
    if skipped:
        warnings.warn(
            f"not plotted, no test finished in them yet: {', '.join(skipped)}", stacklevel=3
        )
    if unreadable:
        warnings.warn(f"not plotted: {'; '.join(unreadable)}", stacklevel=3)
    if set_aside:
        overwrite = option("overwrite=True", "--overwrite")
        warnings.warn(
            f"not plotted: {', '.join(map(str, set_aside))}, an earlier run set aside by an "
            f"interrupted start with {overwrite}, not a run of its own (`rlblocks describe` of "
            "the run directory above it says how to restore or discard it)",
            stacklevel=3,
        )
    if not runs:
        damaged = f" ({len(unreadable)} unreadable: see the warning)" if unreadable else ""
        raise CheckpointError(f"none of the runs has a finished test to plot{damaged}")
    return runs


def _group_runs(
    runs: list[_PlotRun], group_by: Sequence[str] | None, label: str | None
) -> dict[str, dict[str, list[_PlotRun]]]:
    """``{env: {group label: runs}}``. Runs of one env are grouped by algorithm and by the
    config fields that differ between that algorithm's runs there (not seeds, paths, budgets
    or test schedules: :data:`_NOT_GROUPED`), or by the fields of ``group_by``; ``label``
    (a template such as ``"{algo} lr={algo.lr}"``) names each group."""
    known = sorted({k for r in runs for k in r.config})
    for path in group_by or ():
        if path not in known:
            close = difflib.get_close_matches(path, known, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(
                f"--group-by {path}: no run's config has this field{hint} (fields are "
                "SECTION.NAME as in config.json, e.g. algo.lr)"
            )
    if label is not None:
        _check_label(label, known)
    panels: dict[str, dict[str, list[_PlotRun]]] = {}
    by_algo_env: dict[tuple[str, str], list[_PlotRun]] = {}
    for r in runs:
        by_algo_env.setdefault((r.env, r.algo), []).append(r)
    for (env, algo), members in sorted(by_algo_env.items()):
        if group_by is not None:
            fields = list(group_by)
        else:
            keys = sorted({k for r in members for k in r.config} - set(_NOT_GROUPED))
            fields = [
                k for k in keys
                if len({_shown(r.config.get(k)) for r in members}) > 1
            ]  # fmt: skip
        for r in members:
            values = [f"{k}={_shown(r.config.get(k))}" for k in fields]
            if label is not None:
                name = _format_label(label, r)
            else:
                name = f"{algo} ({', '.join(values)})" if values else algo
            panels.setdefault(env, {}).setdefault(name, []).append(r)
    return panels


def _check_label(template: str, known: Sequence[str]) -> None:
    """Refuse a ``--label`` template whose placeholders name no run's config field."""
    hint = "use {algo}, {env} and {SECTION.FIELD} placeholders such as {algo.lr}"
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"--label {template!r}: {exc}; {hint}") from None
    for f in fields:
        if f in {"algo", "env"} or f in known:
            continue
        close = difflib.get_close_matches(f, known, n=3)
        mean = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise ConfigError(f"--label {template!r}: no run's config has {f!r}{mean}; {hint}")


def _format_label(template: str, run: _PlotRun) -> str:
    sections: dict[str, dict[str, Any]] = {}
    for path, value in run.config.items():
        head, _, rest = path.partition(".")
        if rest:
            sections.setdefault(head, {})[rest] = value
    names = {"algo": run.algo, "env": run.env}

    class _Sections(dict):
        def __missing__(self, key: str) -> _Section:  # a section this run's config lacks
            return _Section(names.get(key, ""), {})

    mapping = _Sections({k: _Section(names.get(k, ""), v) for k, v in sections.items()})
    try:
        return template.format_map(mapping)
    except (KeyError, AttributeError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"--label {template!r}: {exc!r} is not in the run's config; use {{algo}}, {{env}} "
            "and {SECTION.FIELD} placeholders such as {algo.lr}"
        ) from None


def learning_curve(
    runs: Sequence[Sequence[Mapping[str, float]]],
    x: str = "env_steps",
    statistic: str = "mean",
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One curve over several runs' tests (each a list of ``tests.csv`` rows):
    ``(grid, centre, low, high)`` on the union of their test points. ``statistic`` is
    ``"mean"`` (percentile-bootstrap band) or ``"iqm"`` (interquartile mean, stratified
    bootstrap band as rliable draws it). A run has no value before its first test nor after
    its last: each point is over the runs that reached it, so the curve ends where the last
    run ended and never holds a stopped run's last value."""
    if statistic not in {"mean", "iqm"}:
        raise ConfigError(f"statistic must be mean or iqm, got {statistic!r}")
    column = {"env_steps": "env_step", "wall_seconds": "wall_seconds"}.get(x)
    if column is None:
        raise ConfigError(f"x must be env_steps or wall_seconds, got {x!r}")
    if not runs or any(not rows for rows in runs):
        raise ConfigError("every run of a curve needs at least one test")
    xs = [np.array([r[column] for r in rows], dtype=np.float64) for rows in runs]
    ys = [np.array([r["return_mean"] for r in rows], dtype=np.float64) for rows in runs]
    grid = np.unique(np.concatenate(xs))
    curves = np.stack(
        [np.interp(grid, a, b, left=np.nan, right=np.nan) for a, b in zip(xs, ys)]
    )
    if statistic == "mean":
        centre, lo, hi = bootstrap_band(curves, confidence=confidence, seed=seed)
        return grid, centre, lo, hi
    centre = np.asarray(nan_iqm(curves, axis=0), dtype=np.float64)
    if len(runs) < 2:
        return grid, centre, centre.copy(), centre.copy()
    lo, hi = stratified_bootstrap([curves], nan_iqm, confidence=confidence, seed=seed)
    return grid, centre, lo, hi


def group_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    group_by: Sequence[str] | None = None,
    label: str | None = None,
) -> dict[str, dict[str, list[Path]]]:
    """How :func:`plot_runs` draws ``run_dirs``: ``{env id: {curve label: [run dirs]}}``, one
    panel per env and one curve per group (see :func:`plot_runs` for the grouping)."""
    panels = _group_runs(_read_plot_runs(run_dirs), group_by, label)
    return {
        env: {name: [r.path for r in runs] for name, runs in groups.items()}
        for env, groups in panels.items()
    }


def plot_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    x: str = "env_steps",
    title: str | None = None,
    group_by: Sequence[str] | None = None,
    label: str | None = None,
    seeds: bool = False,
) -> dict[str, int]:
    """Plot the test-return curves of ``run_dirs`` (run directories, or folders holding some:
    see :func:`find_runs`; each run once) into ``out`` (PNG, PDF, SVG... by its suffix).

    One panel per env, each with its own y axis. In a panel, one curve per group: runs of one
    algorithm whose configs differ only in seeds, paths, budgets or test schedules, or that
    share the fields of ``group_by`` (config paths such as ``"algo.lr"``); ``label`` is a
    template naming each group (``"{algo} lr={algo.lr}"``). A curve is the mean over its
    group's runs with a 95% bootstrap band, or with ``seeds`` the interquartile mean with a 95%
    stratified-bootstrap band (rliable's estimators; a warning under 5 runs). At each point
    only the runs that reached it count, so a curve stops where its last run stopped, and a
    marker shows where each earlier run stopped (solved, or a shorter budget). Returns the
    number of runs per curve, keyed ``"GROUP on ENV"``."""
    if x not in {"env_steps", "wall_seconds"}:
        raise ConfigError(f"x must be env_steps or wall_seconds, got {x!r}")
    problem = writable_file_problem(out)  # before the runs are read and drawn
    if problem is not None:
        raise ConfigError(f"cannot write the plot: {problem}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("plotting needs matplotlib: pip install 'rlblocks[plot]'") from exc
    if not run_dirs:
        raise ConfigError("no run directories to plot")
    out = Path(out)
    formats = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if out.suffix and out.suffix[1:].lower() not in formats:
        raise ConfigError(
            f"cannot write a plot as {out.suffix!r}; use one of "
            f"{', '.join('.' + f for f in sorted(formats))}"
        )
    panels = _group_runs(_read_plot_runs(run_dirs), group_by, label)
    column = "env_step" if x == "env_steps" else "wall_seconds"
    cols = min(3, len(panels))
    rows_n = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        rows_n, cols, figsize=(6.4 * cols, 4.2 * rows_n), squeeze=False
    )
    counts: dict[str, int] = {}
    few: list[str] = []
    for ax, (env, groups) in zip(axes.flat, panels.items()):
        for name, runs in groups.items():
            counts[f"{name} on {env}"] = len(runs)
            grid, centre, lo, hi = learning_curve(
                [run.rows for run in runs], x=x, statistic="iqm" if seeds else "mean"
            )
            if seeds and few_seeds_note(len(runs)) is not None:
                few.append(f"{name} on {env} ({len(runs)})")
            xs = [np.array([r[column] for r in run.rows], dtype=np.float64) for run in runs]
            tag = f"{name} ({len(runs)} run{'s' * (len(runs) > 1)})"
            (line,) = ax.plot(grid, centre, label=tag)
            if len(runs) > 1:
                ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.25)
                ends = [(a[-1], np.interp(a[-1], grid, centre)) for a in xs if a[-1] < grid[-1]]
                if ends:  # where the runs that stopped earlier stopped
                    ax.plot(*zip(*ends), "o", color=line.get_color(), markersize=4)
        ax.set_title(env)
        ax.set_xlabel("env steps" if x == "env_steps" else "wall seconds")
        ax.set_ylabel("test return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    what = "IQM over seeds, 95% stratified bootstrap band" if seeds else (
        "mean over runs, 95% bootstrap band"
    )
    fig.suptitle(title or f"test return ({what})")
    fig.tight_layout()
    if few:
        warnings.warn(
            f"{few_seeds_note(min(counts.values()))} (curves: {', '.join(few)})", stacklevel=2
        )
    # matplotlib adds its default format's suffix to a name without one: so does the file
    target = out if out.suffix else out.with_name(out.name + ".png")
    try:
        with atomic_write(target, "wb") as fh:
            fig.savefig(fh, dpi=100, format=target.suffix[1:].lower())
    finally:
        plt.close(fig)
    return counts


# -- describing an algorithm's config ---------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under each field of an attrs class (and its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not attrs.has(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for a, b in itertools.pairwise(body):
            if (
                isinstance(a, ast.AnnAssign)
                and isinstance(a.target, ast.Name)
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)
            ):
                docs[a.target.id] = " ".join(inspect.cleandoc(b.value.value).split())
    return docs


def _networks_line(spec: Any) -> str:
    """What ``describe`` says of the networks a user may bring to the algorithm of ``spec``."""
    parts = list(getattr(spec, "networks", ()) or ())
    if not parts:
        return "networks of your own: none (it builds all of its networks; its config sizes them)"
    line = (
        f"networks of your own: {', '.join(parts)} (nn.Modules or factories of the spaces: "
        "make_policy(..., actor=...), train(..., networks={...}))"
    )
    if "encoder" in parts:
        line += "; in a config: algo.encoder = 'package.module:factory'"
    return line


def describe_algo(algo: str, env: str | None = None, width: int = 100) -> str:
    """Every config field a run of ``algo`` resolves (on ``env``, default: the algorithm's own
    default env), with its type, its class default, the value the run gets, and its meaning."""
    import rlblocks.run as cfg
    from rlblocks.run import check_env_id, spec_lookup

    spec = spec_lookup("algo", algo)
    if env:
        check_env_id(env)  # a typo is named, not described as if it were an env
    flags = {"env": {"id": env}} if env else {}
    resolved = cfg.build_config(algo, flags=flags, spec_lookup=spec_lookup)
    # an env the algorithm cannot take is refused as `rlblocks train` refuses it
    unchecked = _check_fits_env(spec, resolved) if env else None
    env_id = resolved.env.id
    lines = [
        f"{algo}: {spec.summary}",
        f"values for env {env_id} (class default shown where the algorithm or its preset for "
        "this env sets another); set any with --set SECTION.FIELD=VALUE",
    ]
    if unchecked:
        lines.append(unchecked)
    lines.append(_networks_line(spec))
    presets = [p for p in (getattr(spec, "env_defaults", None) or {})]
    if presets:
        lines.append(f"env presets: {', '.join(presets)}")
    for section in ("algo", "trainer", "env", "buffer", "run"):
        obj = resolved.algo if section == "algo" else getattr(resolved, section)
        if obj is None or not attrs.has(type(obj)):
            continue
        lines += ["", f"[{section}]  ({type(obj).__name__})"]
        docs = field_docs(type(obj))
        for a in attrs.fields(type(obj)):
            value = getattr(obj, a.name)
            if attrs.has(type(value)):
                continue  # a plugin's options: listed by its own section below
            default = _field_default(a)
            shown = _short(value)
            type_name = _type_name(a.type)
            head = f"  {a.name} = {shown}"
            tail = f"{type_name}"
            if default is not attrs.NOTHING and _short(default) != shown:
                tail += f", default {_short(default)}"
            lines.append(f"{head}    ({tail})")
            doc = docs.get(a.name)
            if doc:
                lines += textwrap.wrap(
                    doc, width=width, initial_indent="      ", subsequent_indent="      "
                )
        opts = getattr(obj, "options", None)
        if opts is not None and attrs.has(type(opts)):
            lines += [f"  options of {section} ({type(opts).__name__}):"]
            odocs = field_docs(type(opts))
            for a in attrs.fields(type(opts)):
                lines.append(f"    {a.name} = {_short(getattr(opts, a.name))}")
                if odocs.get(a.name):
                    lines += textwrap.wrap(
                        odocs[a.name], width=width, initial_indent="        ",
                        subsequent_indent="        ",
                    )  # fmt: skip
    return "\n".join(lines)


def _check_fits_env(spec: Any, config: Any) -> str | None:
    """Refuse an algorithm (``spec``) that cannot take the spaces of ``config``'s env, with the
    check and the message of a run (one env is made with the run's wrappers, then closed). An
    env that cannot be made here (a missing dependency) leaves the spaces unchecked: the line
    returned says so (the config's values are still worth showing)."""
    import gymnasium as gym

    from rlblocks.contracts import RlblocksError
    from rlblocks.run import check_env_spaces, env_spaces

    try:
        spaces = env_spaces(config)
    except (RlblocksError, gym.error.Error, ImportError) as exc:  # a missing dependency
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"the algorithm's fit to the env's spaces is not checked: {first}"
    check_env_spaces(spec, spaces)
    return None


def describe_run(run_dir: str | os.PathLike[str], width: int = 100) -> str:
    """A run directory in a few lines: what ran (algorithm, env, seed, device, the versions it
    ran with), where it stands (finished and why, running, or stopped with the command that
    continues it), its tests, its checkpoints, and every setting that differs from what the
    installed algorithm would use on that env by default. It reads the run's small files only:
    no checkpoint is loaded and nothing in the directory is executed."""
    run = Path(run_dir)
    if not (run / "config.json").is_file():
        replaced = replaced_run_note(run)
        raise CheckpointError(
            f"{run} is not a run directory: no config.json in it (pass a run directory, or an "
            "algorithm name to see its config fields)" + (f"; {replaced}" if replaced else "")
        )
    f = _RunFacts(run)
    made_by = f" (envs from the factory {f.factory})" if f.factory else ""
    lines = [f"{run}: {f.algo} on {f.env_id}{made_by}, seed {f.seed}, device {f.device}"]
    if f.dataset:
        how = "offline, from" if f.offline else "online, also learning from"
        lines.append(f"{how} the dataset {f.dataset}")
    if f.init_from:
        start = f.init_from
        data = " and its data in the replay buffer" if start.get("buffer") else ""
        lines.append(
            f"started from the weights of the {start.get('algo', '?')} run {start.get('run')}"
            f"{data}"
        )
    if f.versions:
        v = f.versions
        parts = [f"rlblocks {v.get('rlblocks', '?')}"]
        parts += [f"{c.get('distribution', k)} {c.get('version', '?')}" if c else k
                  for k, c in v.get("components", {}).items()]  # fmt: skip
        parts += [f"{k} {v[k]}" for k in ("torch", "gymnasium", "python") if k in v]
        lines.append("ran with: " + ", ".join(parts))
    r = f.result
    if r is not None:
        lines.append(
            f"{f.status()}: {r.get('stop_reason') or 'done'}; {r.get('env_steps')} env steps, "
            f"{r.get('gradient_steps')} gradient steps, {_seconds(r.get('wall_seconds'))}"
        )
        split = time_split(r)
        if split is not None:
            lines.append(split)
    elif f.holder is None and f.gens and not f.result_problem:
        how = continue_line(run, env_factory=f.factory or None, networks=f.networks)
        lines.append(f"{f.status()}; continue it: {how}")
    else:
        lines.append(f.status())
    if f.tests_problem:
        lines.append(f"tests: {TESTS_FILE} is damaged, so they are not shown (see the note)")
    elif f.tests:
        best, last = f.best_test(), f.tests[-1]
        lines.append(
            f"tests: {len(f.tests) + f.screened}{f.screened_note()}; last "
            f"{'full test ' if f.screened else ''}at {f.step_name} {last[f.step_column]}: "
            f"{_num(last['return_mean'])} +- {_num(last.get('return_std', math.nan))} over "
            f"{last.get('episodes', '?')} episodes; best {_num(best['return_mean'])} at "
            f"{f.step_name} {best[f.step_column]}"
        )
    elif f.screened:
        lines.append(f"tests: {f.screened}{f.screened_note()}; no full test yet")
    else:
        lines.append("tests: none finished yet")
    ckpts = []
    if (run / "checkpoints" / "best.pt").is_file():
        ckpts.append("best.pt (the weights of the best test; rlblocks eval uses it)")
    if f.gens:
        buffer = ", with the replay buffer" if (f.gens[0] / "buffer.h5").is_file() else ""
        ckpts.append(f"{f.gens[0].name}{f.at_step()} (the resume point{buffer})")
    lines.append("checkpoints: " + ("; ".join(ckpts) if ckpts else "none"))
    lines += _settings_changed(f.algo, f.env_id, f.data, width)
    lines += [f"note: {n}" for n in f.notes]
    return _wrap(lines, width)


def describe_runs(folder: str | os.PathLike[str], width: int = 100) -> str:
    """One line per run directory below ``folder`` (the seed runs of ``train --seeds``, a
    folder of runs): algorithm, env, seed, where it stands and its best test."""
    folder = Path(folder)
    set_aside: list[Path] = []
    found = find_runs([folder], set_aside)
    lines = [f"{folder}: {len(found)} run(s); `rlblocks describe RUN_DIR` tells more of one"]
    runs = {run.resolve() for run, _ in found}
    for held in set_aside:  # a run's own is a note of that run's line
        if held.parent.resolve() not in runs:
            name = held.relative_to(folder) if held.is_relative_to(folder) else held
            note = replaced_run_note(held.parent) or "set aside by a start running now"
            lines += [f"  {name}: not a run of its own", f"    note: {note}"]
    for run, _ in found:
        name = run.relative_to(folder) if run.is_relative_to(folder) else run
        try:
            f = _RunFacts(run)
        except CheckpointError as exc:  # one damaged run must not hide the others
            lines.append(f"  {name}: unreadable ({exc})")
            continue
        best = f.best_test()
        score = f"best test {_num(best['return_mean'])}" if best else "no test yet"
        if f.tests_problem:
            score = f"{TESTS_FILE} is damaged"
        lines.append(f"  {name}: {f.algo} on {f.env_id}, seed {f.seed}; {f.status()}; {score}")
        lines += [f"    note: {n}" for n in f.notes]
    return _wrap(lines, width)


class _RunFacts:
    """What a run directory's small files say: config, versions, result, checkpoint
    generations, the lock's holder, full tests; problems met on the way in ``notes``."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.notes: list[str] = []
        data = _read_json(run / "config.json", self.notes)
        if not isinstance(data, dict):
            raise CheckpointError(f"{run}: {self.notes[-1] if self.notes else 'bad config.json'}")
        self.data = data
        self.algo = str(data.get("algo_name", "?"))
        env = data.get("env") if isinstance(data.get("env"), dict) else {}
        rs = data.get("run") if isinstance(data.get("run"), dict) else {}
        self.env_id, self.seed, self.device = env.get("id", "?"), rs.get("seed"), rs.get("device")
        #: the env factory a run trained with (train(env=callable)), or None
        self.factory = env.get("factory")
        #: the networks a run got from Python (train(networks=...)): part -> where from
        self.networks = rs.get("networks") if isinstance(rs.get("networks"), dict) else {}
        #: where a run started from (train(init_from=...)), or None
        self.init_from = rs.get("init_from") if isinstance(rs.get("init_from"), dict) else None
        buffer = data.get("buffer") if isinstance(data.get("buffer"), dict) else {}
        trainer = data.get("trainer") if isinstance(data.get("trainer"), dict) else {}
        #: the dataset the run learns from, or None
        self.dataset = buffer.get("dataset")
        #: an offline run (its budget, and so its progress, is in gradient steps; an online run
        #: that also learns from a dataset, as GAIL's, counts env steps)
        self.offline = self.dataset is not None and trainer.get("max_gradient_steps") is not None
        #: the tests.csv column and the wording of the run's progress
        self.step_column, self.step_name = (
            ("gradient_steps", "gradient step") if self.offline else ("env_step", "env step")
        )
        self.versions = self._optional("plugins.json")
        #: what is wrong with result.json (resume refuses the run until it is restored or gone)
        self.result_problem = ""
        try:
            self.result = read_result(run)
        except CheckpointError as exc:
            self.result, self.result_problem = None, str(exc)
            self.notes.append(str(exc))
        store = GenerationStore(run / "checkpoints")
        self.gens = store.candidates()  # [0]: the one resume loads if it is whole
        self.gen_step = None
        if self.gens:
            try:
                key = "gradient_step" if self.offline else "env_step"
                self.gen_step = store.manifest(self.gens[0]).get(key)
            except (OSError, ValueError):
                self.notes.append(f"checkpoints/{self.gens[0].name}/MANIFEST.json is unreadable")
        self.holder = RunDirLock.holder(run) if self.result is None else None
        tests: list[dict[str, float]] = []
        #: what is wrong with tests.csv ("" when it reads or is not there yet)
        self.tests_problem = ""
        try:
            tests = read_tests(run) if (run / TESTS_FILE).is_file() else []
        except CheckpointError as exc:
            self.tests_problem = str(exc)
            self.notes.append(str(exc))
        self.tests = [t for t in tests if not t.get("screen")]
        #: screened tests (rows with screen=1): they ended after their first few episodes
        self.screened = len(tests) - len(self.tests)
        replaced = replaced_run_note(run)
        if replaced:
            self.notes.append(replaced)

    def _optional(self, name: str) -> Any:
        return _read_json(self.run / name, self.notes) if (self.run / name).is_file() else None

    def at_step(self) -> str:
        return f" at {self.step_name} {self.gen_step}" if self.gen_step is not None else ""

    def screened_note(self) -> str:
        """What of the tests were screened (rows of tests.csv with screen=1), or ""."""
        if not self.screened:
            return ""
        return (
            f" ({self.screened} screened: ended after their first episodes fell clearly short "
            "of stop_reward)"
        )

    def best_test(self) -> dict[str, float] | None:
        return max(self.tests, key=lambda t: t["return_mean"]) if self.tests else None

    def status(self) -> str:
        if self.result_problem:
            return f"state unknown: {RESULT_FILE} is damaged (see the note)"
        if self.result is not None:
            return "finished (solved)" if self.result.get("solved") else "finished"
        if self.holder is not None:
            return f"running now (pid {self.holder} holds the run directory)"
        if self.gens:
            return f"not finished: its last checkpoint is{self.at_step()}"
        return "not finished, and no checkpoint was written: train it again"


def _wrap(lines: list[str], width: int) -> str:
    """Lines longer than ``width`` go on indented under themselves."""
    wrapped = []
    for line in lines:
        lead = " " * (len(line) - len(line.lstrip()))
        parts = textwrap.wrap(line, width=width, subsequent_indent=lead + "    ",
                              break_on_hyphens=False, break_long_words=False)  # fmt: skip
        wrapped += parts or [""]
    return "\n".join(wrapped)


def _read_json(path: Path, notes: list[str]) -> Any:
    """A run's JSON file, or None with what is wrong with it in ``notes``."""
    try:
        check_file(path)
    except CheckpointError as exc:
        notes.append(str(exc))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name} is unreadable ({exc})")
        return None


def _settings_changed(algo: str, env_id: str, data: Mapping[str, Any], width: int) -> list[str]:
    """Lines naming each config value of the run that differs from the installed algorithm's
    default for ``env_id`` (presets included)."""
    import rlblocks.run as cfg
    from rlblocks.contracts import RlblocksError
    from rlblocks.run import spec_lookup

    try:
        default = cfg.to_dict(
            cfg.build_config(algo, flags={"env": {"id": env_id}}, spec_lookup=spec_lookup)
        )
    except RlblocksError as exc:
        return [f"settings: cannot compare with {algo}'s defaults here ({exc}); config.json "
                "holds every value"]  # fmt: skip
    saved, base = _leaves(data), _leaves(default)
    changed = [
        (path, value) for path, value in saved.items()
        if path not in ("algo_name", "run.seed", "run.run_dir")
        and base.get(path, _MISSING) != value
    ]  # fmt: skip
    if not changed:
        return [f"settings: {algo}'s defaults for {env_id}"]
    out = [f"settings that differ from {algo}'s defaults for {env_id} (--set SECTION.FIELD):"]
    for path, value in changed:
        was = base.get(path, _MISSING)
        tail = "not a default field" if was is _MISSING else f"default {_short(was)}"
        out.append(f"  {path} = {_short(value)}    ({tail})")
    return out


_MISSING = object()


def _leaves(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened to dotted paths (lists and other values are leaves)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_leaves(v, path + "."))
        else:
            out[path] = v
    return out


def _num(x: Any) -> str:
    try:
        return f"{float(x):.4g}" if math.isfinite(float(x)) else "nan"
    except (TypeError, ValueError):
        return "?"


def _seconds(x: Any) -> str:
    try:
        s = float(x)
    except (TypeError, ValueError):
        return "? s"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _field_default(a: Any) -> Any:
    d = a.default
    if isinstance(d, attrs.Factory):  # type: ignore[arg-type]
        return d.factory() if not d.takes_self else attrs.NOTHING
    return d


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if isinstance(value, list | dict | tuple) else str(value)
    if isinstance(value, str):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(t: Any) -> str:
    if t is None:
        return "any"
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


# -- who holds a run directory ----------------------------------------------------------------
