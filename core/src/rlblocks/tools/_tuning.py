"""Hyperparameter search with Optuna: ``rlblocks tune dqn --env CartPole-v1 --trials 20``.

Each trial trains from scratch with sampled settings on a fixed budget (env steps; gradient
steps for an offline algorithm, whose trials all learn from one ``--dataset``) and reports
every test return to Optuna, whose pruner (median rule) stops trials that fall behind; a
pruned run stops after its current iteration. A trial's value is the mean of its test returns
(the area under its learning curve), so among settings that reach the same return the faster
learner wins. The study lives in an SQLite file and continues when the command runs again. The
best trial's resolved config is written as TOML, ready for ``rlblocks train ALGO --config``.

The search space is ``--param section.field=DISTRIBUTION`` (repeatable), with
``loguniform:LOW:HIGH``, ``uniform:LOW:HIGH``, ``int:LOW:HIGH`` and ``choice:A|B|C`` (TOML
values); without any, a default space over the fields the algorithm has: its learning rates
(log-uniform over a decade either side of the default), ``gamma``, ``n_step``, the batch size
and the hidden sizes.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rlblocks.contracts import ConfigError, writable_dir_problem, writable_file_problem
from rlblocks.plugins import hookimpl

__all__ = ["Distribution", "default_space", "parse_param", "tune"]


@attrs.frozen
class Distribution:
    """One searched field: ``kind`` is loguniform, uniform, int or choice."""

    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    def bounds(self) -> list[tuple[str, Any]]:
        """The values that mark the edges of the search: ``(what, value)`` for the low and high
        end of a range, each choice of a categorical one."""
        if self.kind == "choice":
            return [(f"choice {_toml_value(c)}", c) for c in self.choices]
        low, high = (int(self.low), int(self.high)) if self.kind == "int" else (self.low, self.high)
        return [(f"low end {low!r}", low), (f"high end {high!r}", high)]

    def suggest(self, trial: Any, name: str) -> Any:
        if self.kind == "loguniform":
            return trial.suggest_float(name, self.low, self.high, log=True)
        if self.kind == "uniform":
            return trial.suggest_float(name, self.low, self.high)
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high))
        if all(isinstance(c, bool | int | float | str) for c in self.choices):
            return trial.suggest_categorical(name, list(self.choices))
        # Optuna's categorical choices must be plain scalars: lists travel as their TOML text
        keys = [_toml_value(c) for c in self.choices]
        picked = trial.suggest_categorical(name, keys)
        return self.choices[keys.index(picked)]


def _toml_value(value: Any) -> str:
    """One line of TOML for a scalar or a (nested) list: ``[64, 64]``, ``0.99``, ``"relu"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot search over {value!r}: use numbers, strings, booleans or lists")


def parse_param(text: str) -> tuple[str, Distribution]:
    """``"algo.lr=loguniform:1e-5:1e-2"`` -> ("algo.lr", Distribution(...))."""
    key, sep, spec = text.partition("=")
    key = key.strip()
    if not sep or "." not in key:
        raise ConfigError(f"--param {text!r}: write section.field=DISTRIBUTION")
    kind, _, rest = spec.strip().partition(":")
    try:
        if kind in {"loguniform", "uniform", "int"}:
            lo, _, hi = rest.partition(":")
            low, high = float(lo), float(hi)
            if not low < high or (kind == "loguniform" and low <= 0):
                raise ValueError
            if kind == "int" and not (low.is_integer() and high.is_integer()):
                raise ConfigError(
                    f"--param {text!r}: int:LOW:HIGH searches whole numbers, and {lo}:{hi} has "
                    "a fraction; give whole bounds (e.g. int:2:3), or search floats with "
                    "uniform:LOW:HIGH"
                )
            return key, Distribution(kind, low, high)
        if kind == "choice":
            values = tuple(
                tomllib.loads(f"v = {c}")["v"] if c.strip() else c for c in rest.split("|")
            )
            if len(values) < 2:
                raise ValueError
            return key, Distribution("choice", choices=values)
    except ConfigError:
        raise
    except (ValueError, tomllib.TOMLDecodeError):
        pass
    raise ConfigError(
        f"--param {text!r}: use loguniform:LOW:HIGH, uniform:LOW:HIGH, int:LOW:HIGH or "
        "choice:A|B|C (e.g. algo.lr=loguniform:1e-5:1e-2, algo.hidden_sizes=choice:[64]|[128])"
    )


#: the first bytes of every SQLite database file
_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_study_file(path: Path) -> None:
    """A study file must be an SQLite database (an earlier tune's) or not exist yet (an empty
    file is as good as none); anything else is refused before Optuna would write into it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"--study {path}: cannot read it ({exc.strerror or exc})") from exc
    if head and head != _SQLITE_HEADER:
        raise ConfigError(
            f"--study {path} is not an SQLite database (an Optuna study file written by "
            "rlblocks tune); pass the .db file of an earlier tune, or a new file name"
        )


def default_space(config: Any) -> dict[str, Distribution]:
    """A search space over the common fields ``config`` (a resolved ExperimentConfig) has."""
    space: dict[str, Distribution] = {}
    algo = config.algo
    for a in attrs.fields(type(algo)):
        value = getattr(algo, a.name)
        if (a.name == "lr" or a.name.endswith("_lr")) and isinstance(value, float) and value > 0:
            space[f"algo.{a.name}"] = Distribution("loguniform", value / 10, min(value * 10, 1.0))
        elif a.name == "gamma" and isinstance(value, float):
            space["algo.gamma"] = Distribution("choice", choices=(0.9, 0.95, 0.98, 0.99, 0.995))
        elif a.name == "n_step" and isinstance(value, int):
            space["algo.n_step"] = Distribution("int", 1, 5)
        elif a.name == "hidden_sizes":
            space["algo.hidden_sizes"] = Distribution(
                "choice", choices=([64, 64], [128, 128], [256, 256])
            )
    space["trainer.batch_size"] = Distribution("choice", choices=(32, 64, 128, 256))
    return space


def check_space(
    algo: str,
    space: Mapping[str, Distribution],
    overrides: Sequence[str] = (),
    flags: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Refuse a searched field whose range reaches values its config field refuses: each end of
    a range and each choice is put into the config a trial would build (with ``overrides`` and
    ``flags``), and the first one refused is a ConfigError naming the field and the value."""
    import rlblocks.run as cfg
    from rlblocks.run import spec_lookup

    for key, dist in space.items():
        for what, value in dist.bounds():
            try:
                cfg.build_config(
                    algo,
                    overrides=[*overrides, f"{key}={_toml_value(value)}"],
                    flags={k: dict(v) for k, v in (flags or {}).items()},
                    spec_lookup=spec_lookup,
                )
            except ConfigError as exc:
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise ConfigError(
                    f"--param {key}: the {what} is refused by the field ({detail}); search a "
                    "range of values the field accepts"
                ) from None


class _Reporter:
    """Sends each test return to the trial; asks the trainer to stop when Optuna prunes."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.returns: list[float] = []
        self.pruned = False

    @hookimpl
    def rlblocks_test_end(self, stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
        value = float(stats.get("return_mean", math.nan))
        # the objective averages full tests, as it did before screened tests reached this hook
        if not math.isfinite(value) or stats.get("screened"):
            return
        self.returns.append(value)
        # the trial's progress: env steps online, gradient steps offline (no env step is taken)
        step = int(getattr(trainer, "progress", env_step))
        self.trial.report(float(sum(self.returns) / len(self.returns)), step)
        if self.trial.should_prune():
            self.pruned = True
            trainer.request_stop("pruned by the Optuna study")


def tune(
    algo: str,
    *,
    env: str | None = None,
    trials: int = 20,
    max_env_steps: int | None = None,
    max_gradient_steps: int | None = None,
    dataset: str | os.PathLike[str] | None = None,
    params: Sequence[str] = (),
    study_path: str | os.PathLike[str] | None = None,
    study_name: str | None = None,
    out: str | os.PathLike[str] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    overrides: Sequence[str] = (),
    report: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run ``trials`` more trials of a (resumable) study; write the best config as TOML.

    An offline algorithm's trials all learn from ``dataset`` (``buffer.dataset``) for
    ``max_gradient_steps`` gradient steps each; ``max_env_steps`` is refused for it, and
    ``max_gradient_steps`` and ``dataset`` for an online one, as :func:`rlblocks.train` does.

    SIGINT or SIGTERM stops the current trial after its iteration (it is recorded as failed, not
    as a result) and ends the study; the same call continues it.

    Returns ``{"best_value", "best_params", "config_file", "trials"}``, or ``{"stopped": the
    stop reason, "trials", "config_file": None}`` when a signal stopped it."""
    try:
        import optuna
    except ImportError as exc:
        raise ConfigError("rlblocks tune needs Optuna: pip install 'rlblocks[tune]'") from exc
    import rlblocks.run as cfg
    from rlblocks.run import default_run_dir, resolve_train_config, spec_lookup, train

    budget = {"max_env_steps": max_env_steps, "max_gradient_steps": max_gradient_steps}
    # the base config as a trial resolves it: what train refuses (an env-step budget for an
    # offline algorithm, by flag, --set or config) is refused here, before the study
    base_config = resolve_train_config(
        algo, env=env or None, overrides=list(overrides), dataset=dataset, **budget
    )
    flags: dict[str, dict[str, Any]] = {}
    if env:
        flags["env"] = {"id": env}
    flags["trainer"] = {k: int(v) for k, v in budget.items() if v}
    offline = spec_lookup("algo", algo).training == "offline"
    env_id = base_config.env.id
    space = dict(parse_param(p) for p in params) if params else default_space(base_config)
    # a field fixed with --set is not searched: a sampled value would silently replace it
    fixed = {".".join(cfg.parse_override(o)[0]) for o in overrides if isinstance(o, str)}
    both = sorted(fixed & space.keys())
    if params and both:
        raise ConfigError(
            f"{', '.join(both)}: both searched (--param) and fixed (--set); drop one of the two"
        )
    for key in both:  # the default space: the user's value wins, and is said to
        del space[key]
        report(f"not searching {key}: fixed by --set")
    for key in space:  # a typo in a searched field fails now, not in trial 7
        section, _, field = key.partition(".")
        obj = base_config.algo if section == "algo" else getattr(base_config, section, None)
        if obj is None or field not in {a.name for a in attrs.fields(type(obj))}:
            raise ConfigError(f"--param {key}: {algo}'s config has no field {key}")
    # a range the field refuses fails now, by name, not as a failed trial in the study; so does
    # what every trial would refuse (the env id, the device), checked as `train --dry-run` does
    check_space(algo, space, overrides=overrides, flags=flags)
    from rlblocks.run import preflight

    quiet_run = attrs.evolve(base_config.run, loggers=[], logger_options={})  # as trials run
    preflight(attrs.evolve(base_config, run=quiet_run))
    root = Path(run_dir) if run_dir is not None else default_run_dir(f"tune-{algo}", env_id)
    study_file = Path(study_path) if study_path is not None else root / "study.db"
    # where the results go is checked before hours of trials, not when they are written
    config_file = Path(out) if out is not None else root / "best.toml"
    for flag, path, kind in (("--run-dir", root, "dir"), ("--study", study_file, "file"),
                             ("-o", config_file, "file")):  # fmt: skip
        problem = writable_dir_problem(path) if kind == "dir" else writable_file_problem(path)
        if problem is not None:
            raise ConfigError(f"{flag}: {problem}")
    _check_study_file(study_file)
    root.mkdir(parents=True, exist_ok=True)
    study_file.parent.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            study_name=study_name or f"{algo}-{env_id}",
            storage=f"sqlite:///{study_file.resolve()}",
            load_if_exists=True,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0),
        )
    except Exception as exc:  # SQLAlchemy's and Optuna's errors of a file that is no study
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"--study {study_file}: cannot open it as an Optuna study ({first}); pass the .db "
            "file of an earlier tune, or a new file name"
        ) from exc

    stopped: list[str] = []  # the stop reason of a trial cut short by SIGINT/SIGTERM

    def objective(trial: Any) -> float:
        sets = list(overrides)
        for key, dist in space.items():
            sets.append(f"{key}={_toml_value(dist.suggest(trial, key))}")
        reporter = _Reporter(trial)
        trial_dir = root / f"trial-{trial.number}"
        result = train(
            algo, env=env, seed=seed, overrides=sets, dataset=dataset, run_dir=trial_dir,
            progress=False, loggers=[], hooks=[reporter], quiet=True, **budget,
        )  # fmt: skip
        trial.set_user_attr("run_dir", str(trial_dir))
        if str(result.stop_reason).startswith("interrupted"):
            # short of its budget: not a value to compare with the others
            stopped.append(str(result.stop_reason))
            return math.nan
        value = sum(reporter.returns) / len(reporter.returns) if reporter.returns else -math.inf
        steps = (f"{result.gradient_steps} gradient steps" if offline
                 else f"{result.env_steps} env steps")  # fmt: skip
        report(
            f"trial {trial.number}: {'pruned' if reporter.pruned else 'done'}, mean test return "
            f"{value:.1f}, best {result.best_test_return:.1f}, {steps}"
        )
        if reporter.pruned:
            raise optuna.TrialPruned()
        return value

    # ask and tell rather than study.optimize: a trial stopped by a signal is told as failed
    # (quietly: it is no result) and ends the study
    for _ in range(trials):
        trial = study.ask()
        try:
            value = objective(trial)
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        except BaseException:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        if stopped:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
            name = stopped[0].removeprefix("interrupted by ").split()[0] or "interrupted"
            report(
                f"{name}: stopped trial {trial.number} after its current iteration (its run: "
                f"{root / f'trial-{trial.number}'}; not counted in the study, which has {done} "
                f"complete trial(s) in {study_file}); run the same command again to continue "
                "the study"
            )
            return {"stopped": stopped[0], "trials": len(study.trials), "config_file": None}
        study.tell(trial, value)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise ConfigError("no trial completed (all were pruned or failed); run more trials")
    best = study.best_trial
    write_toml_config(Path(best.user_attrs["run_dir"]) / "config.json", config_file, algo, best)
    report(
        f"best: trial {best.number}, mean test return {best.value:.1f}; its config: "
        f"{config_file}\n  train it: rlblocks train {algo} --config {config_file}"
    )
    return {
        "best_value": best.value,
        "best_params": dict(best.params),
        "config_file": str(config_file),
        "trials": len(study.trials),
    }


def write_toml_config(config_json: Path, out: Path, algo: str, trial: Any) -> None:
    """The trial's resolved config as a TOML file for ``--config`` (no run directory in it;
    TOML has no null, so None values are left out and take the defaults). What tuning forced
    on every trial to keep it quiet (no loggers, no progress bar) is left out too, so a run
    trained from the file logs and shows progress as any run does; the trials' budget stays
    (the settings were chosen for it), and the header says how to train longer."""
    import tomli_w

    from rlblocks.run import atomic_write

    data = json.loads(config_json.read_text(encoding="utf-8"))
    data.pop("algo_name", None)
    run = data.get("run", {})
    for key in ("run_dir", "loggers", "progress"):
        run.pop(key, None)
    trainer = data.get("trainer", {})
    # an offline run (it names a dataset and a budget in gradient steps, which online runs
    # refuse) takes no env step: its unused trainer.max_env_steps is left out of the file
    offline = (
        data.get("buffer", {}).get("dataset") is not None
        and trainer.get("max_gradient_steps") is not None
    )
    if offline:
        trainer.pop("max_env_steps", None)
    field, flag = ("max_gradient_steps", "--max-gradient-steps") if offline else (
        "max_env_steps", "--max-env-steps"
    )  # fmt: skip
    budget = trainer.get(field)

    def drop_none(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: drop_none(v) for k, v in x.items() if v is not None}
        if isinstance(x, list):
            return [drop_none(v) for v in x]
        return x

    header = (
        f"# rlblocks tune: best trial {trial.number} of {algo} (mean test return "
        f"{trial.value:.2f})\n# train it: rlblocks train {algo} --config {out.name}\n"
        f"# tuned: {', '.join(f'{k}={v}' for k, v in trial.params.items())}\n"
        f"# budget: the trials' trainer.{field} = {budget}; train longer with {flag} N\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out, "w") as f:
        f.write(header + tomli_w.dumps(drop_none(data)))
