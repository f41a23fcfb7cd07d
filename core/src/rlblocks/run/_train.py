"""Whole runs by name, for users: ``train`` resolves a config, builds an
:class:`~rlblocks.run.Experiment` and runs it; ``resume`` continues a run directory from its
latest checkpoint; ``resolve_train_config`` is the config either would run with."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import torch

from rlblocks.contracts import (
    CheckpointError,
    ConfigError,
    writable_dir_problem,
)
from rlblocks.run import _config as cfg
from rlblocks.run._advice import option
from rlblocks.run._agent import factory_env_message
from rlblocks.run._compose import (
    checked_env_factory,
    installed_default_loggers,
    resolve_device,
    spec_lookup,
)
from rlblocks.run._dataset import (
    absolute_dataset,
)
from rlblocks.run._experiment import Experiment, _warn_stderr
from rlblocks.run._init_from import resolve_init_from
from rlblocks.run._networks import (
    algo_of_policy,
    check_networks,
    check_networks_again,
    check_policy_class_again,
)
from rlblocks.run._rundir import (
    _finished,
    default_run_dir,
    read_result,
    refuse_existing_run,
    replaced_run_note,
)
from rlblocks.run._trust import check_run_imports, check_run_reach
from rlblocks.trainers import (
    TrainResult,
)


def resolve_train_config(
    algo: str,
    *,
    env: str | None = None,
    seed: int | None = None,
    stop_reward: float | None = None,
    backend: str | None = None,
    buffer: str | None = None,
    num_envs: int | None = None,
    loggers: Sequence[str] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    progress: bool | None = None,
    max_env_steps: int | None = None,
    dataset: str | os.PathLike[str] | None = None,
    max_gradient_steps: int | None = None,
    init_from: str | os.PathLike[str] | None = None,
    init_buffer: bool = False,
    trust_imports: bool = False,
) -> cfg.ExperimentConfig:
    """The config :func:`train` would run with these arguments, without running anything.

    Layers apply in :func:`train`'s order (section defaults < the algorithm's defaults and its
    presets for the env < ``config`` < the keyword arguments < ``overrides``). Nothing is built
    or written, so a config can be checked, printed (``rlblocks train ... --dry-run``) or saved
    for ``--config``. ``run.run_dir`` stays None when none is given: :func:`train` then picks a
    fresh timestamped directory, so a saved config can start any number of runs. ``dataset``
    (``buffer.dataset``) is recorded as an absolute path, so a resume finds it from anywhere.
    An offline algorithm takes no env step, so ``trainer.max_env_steps`` is refused from every
    layer (``max_env_steps``, ``overrides``, ``config``) as it would be ignored; only a config
    that records the value the run has anyway (as every config rlblocks writes does) passes.
    """
    if run_dir is not None and not isinstance(run_dir, str | os.PathLike):
        raise ConfigError(
            f"run_dir must be a path (a str or pathlib.Path), got {type(run_dir).__name__} "
            f"{run_dir!r:.40}; pass run_dir='runs/my-run'"
        )
    offline = spec_lookup("algo", algo).training == "offline"
    if max_env_steps is not None and offline:
        raise ConfigError(
            f"max_env_steps: algo {algo!r} trains offline from a dataset and takes no env step; "
            "give its budget in gradient steps instead (max_gradient_steps=N, "
            "--max-gradient-steps N)"
        )
    if offline:
        fix = option("max_gradient_steps=N", "--max-gradient-steps N")
        _refuse_env_budget_overrides(algo, overrides, option("overrides", "--set"), fix)
    flags: dict[str, dict[str, Any]] = {}

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            flags.setdefault(section, {})[key] = value

    put("env", "id", env)
    put("env", "backend", backend)
    put("env", "num_envs", num_envs)
    put("buffer", "name", buffer)
    put("trainer", "stop_reward", stop_reward)
    put("trainer", "max_env_steps", max_env_steps)
    put("trainer", "max_gradient_steps", max_gradient_steps)
    put("buffer", "dataset", os.fspath(dataset) if dataset is not None else None)
    put("run", "seed", seed)
    put("run", "device", device)
    put("run", "progress", progress)
    put("run", "loggers", list(loggers) if loggers is not None else None)
    put("run", "run_dir", str(run_dir) if run_dir is not None else None)
    if config is None or isinstance(config, Mapping):
        file_data = dict(config) if config is not None else None
    else:
        file_data = cfg.load_config_file(config)
    # an offline run's config file may record trainer.max_env_steps (every config rlblocks
    # writes does): it is taken out, and refused below if it asks for anything but the value
    # the run has anyway
    file_budget = _pop_env_budget(file_data) if offline else _UNSET
    record = None
    if init_from is not None:
        layer, record = resolve_init_from(
            init_from, algo, env_given=_names_env(env, file_data, overrides),
            with_buffer=init_buffer, trusted=trust_imports,
        )  # fmt: skip
        file_data = _under(layer, file_data or {})
    elif init_buffer:
        raise ConfigError(
            "init_buffer fills the replay buffer with the data of the run given as init_from; "
            f"pass that run too ({option('init_from=RUN', '--init-from RUN')})"
        )
    resolved = absolute_dataset(cfg.build_config(
        algo, file_data=file_data, overrides=list(overrides), flags=flags, spec_lookup=spec_lookup
    ))  # fmt: skip
    if record is not None:
        resolved = attrs.evolve(resolved, run=attrs.evolve(resolved.run, init_from=record))
    if loggers is None and resolved.run.loggers == list(cfg.DEFAULT_LOGGERS):
        # the defaults, not asked for by name: those not installed are left out with a warning
        kept = installed_default_loggers()
        if kept != resolved.run.loggers:
            resolved = attrs.evolve(resolved, run=attrs.evolve(resolved.run, loggers=kept))
    if file_budget is not _UNSET and file_budget != resolved.trainer.max_env_steps:
        where = "config" if config is None or isinstance(config, Mapping) else (
            f"the config file {os.fspath(config)}"
        )  # fmt: skip
        fix = option("max_gradient_steps=N", "--max-gradient-steps N")
        raise _offline_env_budget_error(algo, f"{file_budget!r} ({where})", fix)
    return resolved


def _names_env(
    env: str | None, file_data: Mapping[str, Any] | None, overrides: Sequence[str]
) -> bool:
    """Whether the user names the env (a flag, the config file, or an ``env.id`` override)."""
    section = (file_data or {}).get("env")
    if env is not None or (isinstance(section, Mapping) and "id" in section):
        return True
    return any(str(o).replace(" ", "").startswith("env.id=") for o in overrides)


def _under(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` merged over it, tables key by key (``top`` wins)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _under(out[key], value)
        else:
            out[key] = value
    return out


def _offline_env_budget_error(algo: str, setting: str, fix: str) -> ConfigError:
    """The refusal of ``trainer.max_env_steps`` (``setting``: its value and where it was set)
    for an offline algorithm, which takes no env step; ``fix`` is how to give its budget."""
    return ConfigError(
        f"$.trainer.max_env_steps: algo {algo!r} trains offline from a dataset and takes no env "
        f"step, so trainer.max_env_steps={setting} would be ignored; remove it and give the "
        f"budget in gradient steps, trainer.max_gradient_steps: {fix}"
    )


def _env_budget_override(override: Any) -> str | None:
    """The value text of an override that sets ``trainer.max_env_steps``, else None."""
    path, value = cfg.parse_override(override) if isinstance(override, str) else override
    return repr(value) if tuple(path) == ("trainer", "max_env_steps") else None


def _refuse_env_budget_overrides(
    algo: str, overrides: Iterable[Any], origin: str, fix: str
) -> None:
    """An override of ``trainer.max_env_steps`` (any value) for the offline ``algo`` is refused:
    the run takes no env step, so it would be ignored. ``origin`` names where overrides come
    from (``--set``), ``fix`` how to give the budget in gradient steps."""
    for override in overrides:
        value = _env_budget_override(override)
        if value is not None:
            raise _offline_env_budget_error(algo, f"{value} ({origin})", fix)


#: what :func:`_pop_env_budget` returns for a config file without ``trainer.max_env_steps``
_UNSET = object()


def _pop_env_budget(file_data: dict[str, Any] | None) -> Any:
    """Take ``trainer.max_env_steps`` out of a config file's data (copying the table, not
    changing the caller's) and return its value; ``_UNSET`` when the file does not set it."""
    trainer = (file_data or {}).get("trainer")
    if file_data is None or not isinstance(trainer, Mapping) or "max_env_steps" not in trainer:
        return _UNSET
    trainer = dict(trainer)
    value = trainer.pop("max_env_steps")
    file_data["trainer"] = trainer
    return value


def train(
    algo: str | Any,
    *,
    env: str | Callable[[], gym.Env] | None = None,
    seed: int | None = None,
    stop_reward: float | None = None,
    backend: str | None = None,
    buffer: str | None = None,
    num_envs: int | None = None,
    loggers: Sequence[str] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    progress: bool | None = None,
    max_env_steps: int | None = None,
    dataset: str | os.PathLike[str] | None = None,
    max_gradient_steps: int | None = None,
    hooks: Iterable[object] = (),
    quiet: bool = False,
    overwrite: bool = False,
    train_fn: Callable[[int, int], None] | None = None,
    test_fn: Callable[[int, int], None] | None = None,
    networks: Mapping[str, Any] | None = None,
    init_from: str | os.PathLike[str] | None = None,
    init_buffer: bool = False,
    trust_imports: bool = False,
) -> TrainResult:
    """Train ``algo`` (a registry name, or a policy object) and return the result.

    Every argument left as None keeps the algorithm's default. ``config`` is a TOML/JSON file or a
    nested dict in the same shape; ``overrides`` are ``"section.field=value"`` strings. ``hooks``
    are extra pluggy hook implementations (callbacks, custom loggers) for this run only;
    ``quiet`` prints nothing (no progress, no summary). ``train_fn(epoch, env_step)`` and
    ``test_fn(epoch, env_step)`` are the trainer's (Tianshou's): called before each training
    collect and each test (see :class:`~rlblocks.trainers.BaseTrainer`). A ``run_dir`` that
    already holds a run is refused (continue it with :func:`resume`) unless ``overwrite``
    replaces that run's files.

    ``loggers`` is the whole list of loggers by name (``[]`` for none; ``tests.csv`` and
    ``result.json`` are written anyway); None uses the default ones (``DEFAULT_LOGGERS``) that
    are installed, with a warning naming the command that installs each one left out.

    ``env`` is a gymnasium id (``"CartPole-v1"``, ``"my_module:MyEnv-v0"``) or a factory that
    returns a new env on each call; the config then records the env's registered id when it has
    one (for presets, the stop reward and ``rlblocks.load``), else the factory's import path, and
    ``resume`` needs the factory again. The returned result's ``agent`` holds the final policy
    (``rlblocks.load(result.run_dir)`` loads the best one).

    An offline algorithm (``td3bc``) learns from ``dataset``, an hdf5 file of
    :meth:`~rlblocks.replay.ReplayBuffer.save_hdf5` (``buffer.dataset``), for
    ``max_gradient_steps`` gradient steps (``trainer.max_gradient_steps``); it takes no env step
    outside its tests, so ``max_env_steps`` is refused for it.

    ``networks`` are your own networks for the parts the algorithm takes (``{"encoder": ...,
    "actor": ..., "critic": ..., "model": ...}``; ``rlblocks describe ALGO`` lists them), each
    an ``nn.Module`` or a factory ``(observation_space, action_space) -> nn.Module``. The run's
    config records where each came from (``run.networks``); loading or resuming the run takes
    them again (``networks=``). ``algo`` may be a policy object instead (``make_policy(...)``
    or an algorithm's policy class): the run trains that policy, with its own config and
    device, as the algorithm whose spec builds its class.

    ``init_from`` (a run directory, or a checkpoint file in one) starts the run from that run's
    policy weights (its ``best.pt``): the same algorithm, or one whose networks fit (an offline
    ``cql`` run for ``sac``, ``discrete-cql`` for ``qrdqn``); a mismatch is refused in one line.
    The run takes that run's env unless one is given, and the algo settings both algorithms
    have, below ``config`` and ``overrides``; ``config.json`` records where it started
    (``run.init_from``). ``init_buffer`` also fills the replay buffer with that run's data (an
    offline run's dataset, an off-policy run's saved replay buffer). That run is read as
    :func:`load` reads it: code its config names is imported only under the trust rule, or with
    ``trust_imports``.
    """
    policy = None
    if not isinstance(algo, str):
        policy, algo = algo, algo_of_policy(algo)
        device = _policy_device(policy, device)
        _refuse_algo_settings(algo, networks, config, overrides)
    env_factory: Callable[[], gym.Env] | None = None
    if env is not None and not isinstance(env, str):
        if not callable(env):
            raise ConfigError(f"env must be a gymnasium id or an env factory, got {env!r}")
        env_factory, env = env, _factory_name(env)
    resolved = resolve_train_config(
        algo,
        env=env,
        seed=seed,
        stop_reward=stop_reward,
        backend=backend,
        buffer=buffer,
        num_envs=num_envs,
        loggers=loggers,
        config=config,
        overrides=overrides,
        run_dir=run_dir,
        device=device,
        progress=progress,
        max_env_steps=max_env_steps,
        dataset=dataset,
        max_gradient_steps=max_gradient_steps,
        init_from=init_from,
        init_buffer=init_buffer,
        trust_imports=trust_imports,
    )
    if env_factory is not None:
        resolved = attrs.evolve(
            resolved, env=attrs.evolve(resolved.env, factory=_factory_path(env_factory))
        )
    resolved = _with_networks(resolved, policy, networks or {})
    rd = resolved.run.run_dir
    if rd is None:
        rd = str(default_run_dir(algo, resolved.env.id))
        resolved = attrs.evolve(resolved, run=attrs.evolve(resolved.run, run_dir=rd))
    elif run_dir is None and not overwrite and (Path(rd) / "config.json").is_file():
        # the directory came from a config (a run's own config.json names its run): reusing
        # the settings is the likely wish, replacing that run almost never
        new = option("run_dir=NEW", "--run-dir NEW")
        cont = option(f"rlblocks.resume({rd!r})", f"`rlblocks resume {shlex.quote(str(rd))}`")
        raise ConfigError(
            f"the config sets run.run_dir={rd}, which already holds a run (a run's config.json "
            f"names its own directory); for a new run with these settings pass {new}, to "
            f"continue that run use {cont}"
        )
    problem = writable_dir_problem(rd)  # before anything reads or writes it
    if problem is not None:
        raise ConfigError(f"the run directory {problem}")
    refuse_existing_run(rd, overwrite)
    return Experiment(
        resolved, rd, hooks=hooks, env_factory=env_factory, quiet=quiet, overwrite=overwrite,
        train_fn=train_fn, test_fn=test_fn, networks=networks, policy=policy,
        trust_imports=trust_imports,
    ).run()  # fmt: skip


def _policy_device(policy: Any, device: str | None) -> str:
    """The device of a run that trains ``policy``: its own (another one asked for is refused)."""
    own = torch.device(getattr(policy, "device", "cpu"))
    if device is not None and torch.device(resolve_device(device)) != own:
        raise ConfigError(
            f"the policy is on {own} and device={device!r} was passed; build the policy on "
            "that device (make_policy(..., device=...)) or leave device out"
        )
    return str(own)


def _refuse_algo_settings(
    algo: str,
    networks: Mapping[str, Any] | None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None,
    overrides: Sequence[str],
) -> None:
    """A policy object brings its networks and its algorithm config: networks or ``algo``
    settings given with it would be ignored, so they are refused."""
    if networks:
        raise ConfigError(
            "networks build a new policy, and a policy object was given (its networks are "
            f"built); pass rlblocks.train({algo!r}, networks=...) or the policy, not both"
        )
    data = config if config is None or isinstance(config, Mapping) else (
        cfg.load_config_file(config)
    )  # fmt: skip
    given = [o for o in overrides if str(o).partition("=")[0].strip().startswith("algo.")]
    if (data and data.get("algo")) or given:
        raise ConfigError(
            "the policy object was built with its algorithm config, so algo settings given "
            "with it would be ignored; set them when building it "
            f"(rlblocks.make_policy({algo!r}, ..., field=value)) and leave them out here"
        )


def _with_networks(
    resolved: cfg.ExperimentConfig, policy: Any, networks: Mapping[str, Any]
) -> cfg.ExperimentConfig:
    """``resolved`` with what a run of the user's networks records: ``run.networks`` (the parts
    from Python, by name) and, for a policy object, its own algo config. The parts are checked
    against the algorithm's spec before any env is made."""
    from rlblocks.algo.nets import describe_part

    spec = spec_lookup("algo", resolved.algo_name)
    if policy is None:
        check_networks(spec, networks)
        record = {part: describe_part(net) for part, net in networks.items()}
        return attrs.evolve(resolved, run=attrs.evolve(resolved.run, networks=record))
    own = getattr(policy, "config", None)
    if spec.config is not None and not isinstance(own, spec.config):
        raise ConfigError(
            f"the policy's config is a {type(own).__name__}, not {spec.config.__name__} (algo "
            f"{resolved.algo_name!r}); build the policy with rlblocks.make_policy"
        )
    record = dict(getattr(policy, "custom_networks", {}))
    if getattr(own, "encoder", None) is not None:
        record.pop("encoder", None)  # the config names it: rebuilt from the import path
    cls = type(policy)
    path = f"{cls.__module__}:{cls.__qualname__}"
    run = attrs.evolve(
        resolved.run, networks=record, policy_class=None if path == spec.impl else path
    )
    return attrs.evolve(resolved, algo=own, run=run)


def _factory_name(factory: Callable[[], gym.Env]) -> str:
    """The id a factory's env registered under, else ``module:qualname`` of the factory."""
    probe = checked_env_factory(factory)()
    try:
        if probe.spec is not None and probe.spec.id:
            return str(probe.spec.id)
    finally:
        probe.close()
    return _factory_path(factory)


def _factory_path(factory: Callable[[], gym.Env]) -> str:
    """``module:qualname`` of an env factory (for the record; never imported back)."""
    module = getattr(factory, "__module__", None) or "factory"
    return f"{module}:{getattr(factory, '__qualname__', type(factory).__name__)}"


def resume(
    run_dir: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    hooks: Iterable[object] = (),
    trust_imports: bool = False,
    env: Callable[[], gym.Env] | None = None,
    train_fn: Callable[[int, int], None] | None = None,
    test_fn: Callable[[int, int], None] | None = None,
    networks: Mapping[str, Any] | None = None,
    policy_class: type | None = None,
    continue_solved: bool = False,
) -> TrainResult:
    """Continue the run in ``run_dir`` from its latest checkpoint, with its saved config.
    (Callables are not saved with a run: pass ``train_fn``/``test_fn`` again to keep them.)

    ``overrides`` (``"trainer.max_env_steps=200000"``; ``"trainer.max_gradient_steps=..."`` for
    an offline run) change the saved config, e.g. to train a finished run for longer. An
    offline run reloads its dataset from ``buffer.dataset`` and refuses a file that changed. An
    env id of the form ``module:EnvId`` is imported only when the module is imported already or
    with ``trust_imports`` (importing runs the module's code); so are env wrappers, a buffer
    part's functions and an ``algo.encoder`` import path. ``trust_imports`` also lets the run's
    config write outside ``run_dir`` (a memory-mapped ``buffer.path``) and contact the endpoints
    it names (MLflow's ``tracking_uri``, W&B's ``entity``...); without it such a setting is
    refused unless ``overrides`` give it again. A run trained on an env factory needs it again
    as ``env``, one trained with networks from Python (``train(networks=...)``) needs them
    again as ``networks``, and one trained from a policy object of your own subclass
    (``train(MyPolicy(...))``) needs the class again as ``policy_class``. A solved run (its
    test return reached ``stop_reward``) is refused unless ``continue_solved`` says to train it
    on (to its budget, or until a later test meets the stop rule again)."""
    run_dir = Path(run_dir)
    config_file = run_dir / "config.json"
    replaced = replaced_run_note(run_dir)
    if not config_file.is_file():
        raise CheckpointError(
            f"{run_dir} is not a run directory: no config.json in it"
            + (f"; {replaced}" if replaced else "")
        )
    if replaced:  # the run resumes; the earlier one stays where it is until restored or deleted
        _warn_stderr(replaced)
    resolved = cfg.read_config(config_file, spec_lookup)
    if env is None and resolved.env.factory is not None:
        raise ConfigError(factory_env_message(
            resolved, "resuming it", f"rlblocks.resume({str(run_dir)!r}, env=<the factory>)"
        ))  # fmt: skip
    check_run_imports(resolved, trusted=trust_imports, env_id=env is None)
    networks = dict(networks or {})
    check_networks_again(
        resolved, networks, "resuming it",
        f"rlblocks.resume({str(run_dir)!r}, networks={{...}}) from Python",
    )  # fmt: skip
    check_policy_class_again(
        resolved, policy_class, "resuming it",
        f"rlblocks.resume({str(run_dir)!r}, policy_class=...) from Python",
    )  # fmt: skip
    finished = _finished(run_dir)
    if spec_lookup("algo", resolved.algo_name).training == "offline":
        _refuse_env_budget_overrides(
            resolved.algo_name,
            overrides,
            option("overrides", "--max-env-steps or --set"),
            option("overrides=['trainer.max_gradient_steps=N']", "--max-gradient-steps N"),
        )
    if overrides:
        resolved = absolute_dataset(cfg.build_config(
            resolved.algo_name,
            file_data=cfg.to_dict(resolved),
            overrides=list(overrides),
            spec_lookup=spec_lookup,
        ))  # fmt: skip
    # what the config names outside the run (files it would write, servers it would contact)
    # comes from the run's own word: refused unless given again above or trusted
    check_run_reach(resolved, run_dir, trusted=trust_imports, overrides=overrides)
    if finished is not None and not continue_solved:
        _refuse_solved(run_dir, overrides)
    if finished is not None:
        offline = spec_lookup("algo", resolved.algo_name).training == "offline"
        env_steps, gradient_steps, reason = finished
        steps = gradient_steps if offline else env_steps
        field, flag, unit = (
            ("max_gradient_steps", "--max-gradient-steps", "gradient steps")
            if offline else ("max_env_steps", "--max-env-steps", "env steps")
        )  # fmt: skip
        if int(getattr(resolved.trainer, field) or 0) <= steps:
            budget = max(2 * steps, steps + 1)
            how = option(
                f"rlblocks.resume({str(run_dir)!r}, overrides=['trainer.{field}={budget}'])",
                f"rlblocks resume {shlex.quote(str(run_dir))} {flag} {budget}",
            )
            raise ConfigError(
                f"{run_dir} finished ({reason}) at {steps} {unit}; to train it further give "
                f"it a larger budget: {how}"
            )
    # a finished run's result.json goes once the run is rebuilt (Experiment._reopen_finished_run)
    return Experiment(
        resolved, run_dir, hooks=hooks, env_factory=env, train_fn=train_fn, test_fn=test_fn,
        networks=networks, policy_class=policy_class,
    ).run(resumed=True)  # fmt: skip


def _refuse_solved(run_dir: Path, overrides: Sequence[str]) -> None:
    """Refuse to continue a run that ended solved (its ``result.json`` says so) unless asked
    with ``continue_solved``: training on would silently undo "solved"."""
    data = read_result(run_dir) or {}
    if not data.get("solved"):
        return
    steps = (
        f"{data.get('env_steps')} env steps"
        if data.get("env_steps")
        else f"{data.get('gradient_steps')} gradient steps"
    )
    given = "".join(f" --set {shlex.quote(str(o))}" for o in overrides)
    how = option(
        f"rlblocks.resume({str(run_dir)!r}, continue_solved=True)",
        f"rlblocks resume {shlex.quote(str(run_dir))} --continue-solved{given}",
    )
    raise ConfigError(
        f"{run_dir} is solved ({data.get('stop_reason') or 'solved'}) at {steps}; "
        f"to train it further anyway: {how}"
    )
