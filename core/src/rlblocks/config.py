"""The run configuration: attrs sections, one cattrs converter, files and overrides.

Users write a flat form, one table per section, where a plugin's options sit directly in the
section that names the plugin::

    algo_name = "dqn"          # only in written configs; runs name the algorithm separately
    [algo]                     # fields of the algorithm's own config class (its spec's ``config``)
    lr = 1e-3
    [buffer]
    name = "prioritized"       # picks the buffer plugin ...
    size = 100_000
    alpha = 0.6                # ... whose config class holds this field (BufferConfig.options)

:func:`build_config` merges section defaults < the algorithm spec's ``defaults`` < a config file <
explicit flags < ``section.field=value`` overrides, then structures the result with
:data:`converter`. Every problem is reported at once, one line each, with its field path
(``$.algo.lr``). Plugin config classes are found through a ``spec_lookup(kind, name)`` callable,
so this module never imports the registry.
"""

import copy
import datetime
import difflib
import fnmatch
import json
import math
import os
import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import define, field
from cattrs.cols import homogenous_tuple_structure_factory, is_mapping, is_sequence
from cattrs.cols import list_structure_factory as _list_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ClassValidationError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, mapping_structure_factory

from rlblocks.errors import ConfigError
from rlblocks.plugins.spec import PluginSpec

__all__ = [
    "BufferConfig",
    "EnvConfig",
    "ExperimentConfig",
    "RunConfig",
    "SpecLookup",
    "TrainerConfig",
    "build_config",
    "converter",
    "load_config_file",
    "parse_override",
    "read_config",
    "structure_options",
    "to_dict",
    "write_config",
]

SpecLookup = Callable[[str, str], PluginSpec]
"""``(kind, name) -> spec``, e.g. ``lambda kind, name: get_registry(kind).spec(name)``."""


# --- validators (they run when a section is built, never in the training loop) -----------------


def _int_at_least(low: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"must be an int >= {low}, got {value!r}")

    return check


def _optional_int_at_least(low: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    check = _int_at_least(low)

    def check_optional(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None:
            check(inst, attribute, value)

    return check_optional


def _non_negative_number(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"must be a finite number >= 0, got {value!r}")


def _non_empty_str(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")


# --- sections ----------------------------------------------------------------------------------

# A section whose ``options`` field holds a plugin's config says which plugin kind and which of
# its own fields names the plugin, e.g. ``("buffer", "name")``.
_PLUGIN_FIELD = "rlblocks_plugin"


@define(kw_only=True)
class EnvConfig:
    """The environments: which gymnasium env, how many copies, and the vector backend."""

    id: str = field(default="CartPole-v1", validator=_non_empty_str)
    """Gymnasium env id, passed to ``gymnasium.make``."""
    num_envs: int = field(default=8, validator=_int_at_least(1))
    """Parallel training envs."""
    num_test_envs: int = field(default=8, validator=_int_at_least(1))
    """Parallel envs used for test evaluations."""
    backend: str = field(default="dummy", validator=_non_empty_str)
    """Registry name of the vector-env backend (``rlblocks list env``)."""
    make_kwargs: dict[str, Any] = field(factory=dict)
    """Extra keyword arguments passed to ``gymnasium.make``."""
    options: Any = field(default=None, metadata={_PLUGIN_FIELD: ("env", "backend")})
    """The backend's own config instance (its spec's ``config``); None when it has none."""


@define(kw_only=True)
class BufferConfig:
    """The replay buffer: which plugin, its capacity, and the plugin's own options."""

    name: str = field(default="replay", validator=_non_empty_str)
    """Registry name of the buffer (``rlblocks list buffer``). A run that names none gets
    "vector" (one sub-buffer per env) when it has several training envs and
    rlblocks-buffer-vector is installed, else "replay"."""
    size: int = field(default=100_000, validator=_int_at_least(1))
    """Capacity in transitions, over all envs."""
    options: Any = field(default=None, metadata={_PLUGIN_FIELD: ("buffer", "name")})
    """The buffer plugin's config instance (e.g. ``ReplayConfig``); None when it has none."""


@define(kw_only=True)
class TrainerConfig:
    """The training loop: how long, how often to collect, learn, test and checkpoint."""

    max_env_steps: int = field(default=1_000_000, validator=_int_at_least(1))
    """Stop after this many env steps (summed over all training envs)."""
    step_per_collect: int = field(default=8, validator=_int_at_least(1))
    """Env steps collected per training collect."""
    update_per_step: float = field(default=1.0, validator=_non_negative_number)
    """Gradient steps per collected env step (off-policy)."""
    batch_size: int = field(default=64, validator=_int_at_least(1))
    """Transitions per gradient step."""
    warmup_steps: int = field(default=0, validator=_int_at_least(0))
    """Env steps with random actions before learning starts."""
    test_interval: int = field(default=5_000, validator=_int_at_least(1))
    """Env steps between test evaluations."""
    test_episodes: int = field(default=100, validator=_int_at_least(1))
    """Episodes per test evaluation."""
    test_in_training: bool = True
    """Also test as soon as the mean return of the latest 10 training episodes reaches the stop
    reward (at most once per quarter of test_interval), so a run stops once solved instead of at
    the next scheduled test."""
    test_screen_episodes: int = field(default=10, validator=_int_at_least(0))
    """With a stop reward, each test first plays this many episodes and goes on to all
    test_episodes only if their mean reaches the stop reward (a test that cannot pass costs a
    tenth); screened-out tests are logged as test_screen and do not count. 0 turns it off; the
    test that ends a run is always complete."""
    stop_reward: float | None = None
    """Stop when the mean test return reaches this; None uses the env's registered threshold."""
    checkpoint_interval: int = field(default=50_000, validator=_int_at_least(1))
    """Env steps between checkpoints."""
    repeat_per_collect: int = field(default=1, validator=_int_at_least(1))
    """Passes over each collected batch (on-policy)."""
    episode_per_collect: int | None = field(default=None, validator=_optional_int_at_least(1))
    """Collect whole episodes instead of ``step_per_collect`` steps when set (on-policy)."""


@define(kw_only=True)
class RunConfig:
    """Run-level settings: seed, device, loggers, where results go."""

    seed: int = field(default=0, validator=_int_at_least(0))
    """Seed of every random generator; env i gets ``seed + i``."""
    device: str = field(default="cpu", validator=_non_empty_str)
    """Torch device of the networks (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    loggers: list[str] = field(factory=lambda: ["tensorboard", "csv"])
    """Registry names of the loggers to attach."""
    run_dir: str | None = None
    """Directory for config, logs and checkpoints; None picks a fresh one under ``runs/``."""
    progress: bool = True
    """Show a progress bar."""
    torch_threads: int = field(default=1, validator=_int_at_least(0))
    """Torch intra-op threads; 1 is fastest for the small networks of most RL runs (and leaves
    cores to the envs), 0 keeps torch's default of one per core."""
    save_buffer: bool = True
    """Write the replay buffer to ``buffer.h5`` at each checkpoint so a resumed run keeps it."""


@define(kw_only=True)
class ExperimentConfig:
    """A whole run: the algorithm's name and config plus the env, buffer, trainer and run sections.

    ``algo`` is an instance of the algorithm spec's ``config`` class (None when it has none).
    """

    algo_name: str = field(validator=_non_empty_str)
    """Registry name of the algorithm."""
    algo: Any
    """The algorithm's own config instance."""
    env: EnvConfig = field(factory=EnvConfig)
    buffer: BufferConfig = field(factory=BufferConfig)
    trainer: TrainerConfig = field(factory=TrainerConfig)
    run: RunConfig = field(factory=RunConfig)


_SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "buffer": BufferConfig,
    "trainer": TrainerConfig,
    "run": RunConfig,
}
_SECTION_NAMES = ("algo", *_SECTIONS)


@define
class _NoOptions:
    """Stands in for the config class of a plugin that takes no options."""


# --- errors raised inside structuring, turned into lines by _error_lines -----------------------


class _WrongType(TypeError):
    def __init__(self, expected: str, value: Any) -> None:
        hint = " (put it in quotes)" if expected == "str" and isinstance(value, int | float) else ""
        super().__init__(f"expected {expected}, got {value!r}{hint}")


class _UnknownKey(Exception):
    def __init__(self, key: str, candidates: Iterable[str], *, section: bool = False) -> None:
        super().__init__(key)
        self.key = key
        self.candidates = tuple(candidates)
        self.section = section


def _noted(exc: Exception, name: str, type_: Any) -> Exception:
    """Attach the field name where ``exc`` happened, the way cattrs' own errors carry it."""
    exc.add_note(AttributeValidationNote(f"Structuring field {name}", name, type_))
    return exc


# --- the converter -----------------------------------------------------------------------------

converter = cattrs.Converter(forbid_extra_keys=True)
"""The one converter for run configs: strict scalars, unknown keys rejected, plugin options
structured into the class their plugin's spec names (needs a spec lookup: use :func:`build_config`
or :func:`read_config` rather than calling ``converter.structure`` on sections directly)."""

_spec_lookup: ContextVar[SpecLookup | None] = ContextVar(
    "rlblocks_config_spec_lookup", default=None
)


@contextmanager
def _using_lookup(spec_lookup: SpecLookup) -> Any:
    token = _spec_lookup.set(spec_lookup)
    try:
        yield
    finally:
        _spec_lookup.reset(token)


def _plugin_config_class(kind: str, name: str) -> type | None:
    lookup = _spec_lookup.get()
    if lookup is None:
        raise ConfigError(
            "plugin options need a spec lookup; build configs with build_config or read_config"
        )
    return lookup(kind, name).config


def _structure_int(value: Any, _type: type) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    # TOML reads 1e5 as a float; an integral float is the int the user meant.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _WrongType("int", value)


def _structure_float(value: Any, _type: type) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _WrongType("float", value)


def _structure_str(value: Any, _type: type) -> str:
    if isinstance(value, str):
        return value
    raise _WrongType("str", value)


def _structure_bool(value: Any, _type: type) -> bool:
    if isinstance(value, bool):
        return value
    raise _WrongType("bool (true or false)", value)


converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(str, _structure_str)
converter.register_structure_hook(bool, _structure_bool)


def _sequence_hook(type_: Any) -> Callable[[Any, Any], Any]:
    origin = getattr(type_, "__origin__", type_)
    if origin is tuple:
        base = homogenous_tuple_structure_factory(type_, converter)
    else:
        base = _list_structure_factory(type_, converter)

    # cattrs accepts any iterable; a string would silently become a list of characters.
    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _WrongType("an array", value)
        return base(value, type_)

    return structure


def _mapping_hook(type_: Any) -> Callable[[Any, Any], Any]:
    origin = getattr(type_, "__origin__", type_)
    structure_to = origin if isinstance(origin, type) and issubclass(origin, dict) else dict
    base = mapping_structure_factory(type_, converter, structure_to)

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _WrongType("a table", value)
        return base(value, type_)

    return structure


def _validation_errors(inst: Any) -> list[Exception]:
    """Run every field validator, collecting all failures instead of stopping at the first."""
    errors: list[Exception] = []
    for a in attrs.fields(type(inst)):
        if a.validator is None:
            continue
        try:
            a.validator(inst, a, getattr(inst, a.name))
        except Exception as exc:
            errors.append(_noted(exc, a.name, a.type))
    return errors


def _attrs_hook(cls: type) -> Callable[[Any, Any], Any]:
    """Structure an attrs class from a table: unknown keys, wrong types and validator failures
    are all collected into one ClassValidationError whose notes carry the field names."""
    base = make_dict_structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=False, _cattrs_detailed_validation=True
    )
    names = tuple(a.name for a in attrs.fields(cls) if a.init)

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _WrongType("a table", value)
        errors: list[Exception] = [
            _noted(_UnknownKey(k, names), k, None) for k in value if k not in names
        ]
        known = {k: v for k, v in value.items() if k in names}
        # Validators run below, one by one, so that every failure gets reported with its field.
        was_disabled = attrs.validators.get_disabled()
        attrs.validators.set_disabled(True)
        try:
            inst = base(known, cls)
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
            inst = None
        finally:
            attrs.validators.set_disabled(was_disabled)
        if inst is not None:
            errors.extend(_validation_errors(inst))
        if errors:
            raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        return inst

    return structure


def _plugin_section_hook(cls: type) -> Callable[[Any, Any], Any]:
    """Structure a section whose ``options`` field holds the named plugin's config, reading the
    plugin's fields from the same (flat) table as the section's own."""
    base = _attrs_hook(cls)
    kind, name_field = attrs.fields_dict(cls)["options"].metadata[_PLUGIN_FIELD]
    own = tuple(a.name for a in attrs.fields(cls) if a.name != "options")
    default_name = attrs.fields_dict(cls)[name_field].default

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _WrongType("a table", value)
        name = value.get(name_field, default_name)
        if not isinstance(name, str):
            # The section's own hook reports the bad name; the rest cannot be checked without it.
            return base({k: v for k, v in value.items() if k in own}, cls)
        option_cls = _plugin_config_class(kind, name)
        option_names = (
            tuple(a.name for a in attrs.fields(option_cls) if a.init) if option_cls else ()
        )
        clash = sorted(set(own) & set(option_names))
        if clash:
            raise ConfigError(
                f"{kind} plugin {name!r} has config fields {clash} that clash with the "
                f"{cls.__name__} fields {list(own)}; the plugin must rename them"
            )
        errors: list[Exception] = [
            _noted(_UnknownKey(k, (*own, *option_names)), k, None)
            for k in value
            if k not in own and k not in option_names
        ]
        options = None
        if option_cls is not None:
            try:
                options = converter.structure(
                    {k: v for k, v in value.items() if k in option_names}, option_cls
                )
            except ClassValidationError as exc:
                errors.extend(exc.exceptions)
        try:
            inst = base({k: v for k, v in value.items() if k in own}, cls)
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
        if errors:
            raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        inst.options = options
        return inst

    return structure


def _structure_experiment(value: Any, _type: Any) -> ExperimentConfig:
    if not isinstance(value, Mapping):
        raise _WrongType("a table", value)
    errors: list[Exception] = [
        _noted(_UnknownKey(k, _SECTION_NAMES, section=True), k, None)
        for k in value
        if k != "algo_name" and k not in _SECTION_NAMES
    ]
    parts: dict[str, Any] = {}
    algo_name = value.get("algo_name")
    if isinstance(algo_name, str):
        algo_cls = _plugin_config_class("algo", algo_name)
        sections: dict[str, type] = {"algo": algo_cls or _NoOptions, **_SECTIONS}
    else:
        missing = KeyError("algo_name") if algo_name is None else _WrongType("str", algo_name)
        errors.append(_noted(missing, "algo_name", str))
        sections = _SECTIONS
    for name, cls in sections.items():
        try:
            parts[name] = converter.structure(value.get(name, {}), cls)
        except Exception as exc:
            errors.append(_noted(exc, name, cls))
    if errors:
        raise ClassValidationError("While structuring ExperimentConfig", errors, ExperimentConfig)
    if isinstance(parts["algo"], _NoOptions):
        parts["algo"] = None
    return ExperimentConfig(algo_name=algo_name, **parts)


converter.register_structure_hook_factory(is_sequence, _sequence_hook)
converter.register_structure_hook_factory(is_mapping, _mapping_hook)
converter.register_structure_hook_factory(attrs.has, _attrs_hook)
converter.register_structure_hook(EnvConfig, _plugin_section_hook(EnvConfig))
converter.register_structure_hook(BufferConfig, _plugin_section_hook(BufferConfig))
converter.register_structure_hook(ExperimentConfig, _structure_experiment)


def _flattening_unstructure(cls: type) -> Callable[[Any], dict[str, Any]]:
    base = make_dict_unstructure_fn(cls, converter)

    def unstructure(inst: Any) -> dict[str, Any]:
        out = base(inst)
        options = out.pop("options")
        if options:
            out.update(options)
        return out

    return unstructure


def _unstructure_experiment(config: ExperimentConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "algo_name": config.algo_name,
        "algo": {} if config.algo is None else converter.unstructure(config.algo),
    }
    for name, cls in _SECTIONS.items():
        out[name] = converter.unstructure(getattr(config, name), cls)
    return out


converter.register_unstructure_hook(EnvConfig, _flattening_unstructure(EnvConfig))
converter.register_unstructure_hook(BufferConfig, _flattening_unstructure(BufferConfig))
converter.register_unstructure_hook(ExperimentConfig, _unstructure_experiment)


# --- error messages ----------------------------------------------------------------------------


def _join_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _unknown_key_line(path: str, parent: str, exc: _UnknownKey, labels: Mapping[str, str]) -> str:
    match = difflib.get_close_matches(str(exc.key), exc.candidates, n=1)
    if exc.section:
        what, listing = "unknown section", "sections"
        if not match:  # a field written at the top level: point at its section
            match = [
                f"{s}.{exc.key}" for s, c in _SECTIONS.items() if exc.key in attrs.fields_dict(c)
            ]
    else:
        section = parent.removeprefix("$").removeprefix(".")
        what, listing = "unknown field", f"fields of {labels.get(section, section)}"
    hint = f"; did you mean {match[0]!r}?" if match else ";"
    listed = ", ".join(exc.candidates) if exc.candidates else "(none)"
    return f"{path}: {what}{hint} {listing}: {listed}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc) or type(exc).__name__


def _error_lines(exc: BaseException, path: str, labels: Mapping[str, str]) -> list[str]:
    """One line per leaf error, each starting with its field path (``$.algo.lr: ...``)."""
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        lines = []
        for sub, note in with_notes:
            child = _join_path(path, note.name)
            if isinstance(sub, _UnknownKey):
                lines.append(_unknown_key_line(child, path, sub, labels))
            else:
                lines += _error_lines(sub, child, labels)
        for sub in without:
            lines += _error_lines(sub, path, labels)
        return lines
    if isinstance(exc, IterableValidationError):
        with_notes, without = exc.group_exceptions()
        lines = []
        for sub, note in with_notes:
            lines += _error_lines(sub, f"{path}[{note.index!r}]", labels)
        for sub in without:
            lines += _error_lines(sub, path, labels)
        return lines
    return [f"{path}: {_describe(exc)}"]


# --- files and overrides -----------------------------------------------------------------------

_OVERRIDE_FORM = "write it as section.field=value, e.g. algo.lr=3e-4 or buffer.name=prioritized"


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``.toml`` or ``.json`` config file into a dict (not yet checked against the
    sections). A missing file or a syntax error raises ConfigError naming the file and line."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in {".toml", ".json"}:
        raise ConfigError(
            f"config file {path}: unknown format {suffix or '(no suffix)'!r}; "
            "use a .toml or .json file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if suffix == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:  # its message ends with "(at line L, column C)"
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg} "
                f"(at line {exc.lineno}, column {exc.colno})"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}: the top level must be an object of sections, got {type(data).__name__}"
            )
    return data


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split ``"algo.lr=3e-4"`` into ``(("algo", "lr"), 0.0003)``.

    The value is read as a TOML value (numbers, ``true``/``false``, quoted strings, arrays,
    inline tables); ``null`` gives None; anything else is kept as a bare string
    (``buffer.name=prioritized``).
    """
    key, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"override {text!r} has no '='; {_OVERRIDE_FORM}")
    path = tuple(part.strip() for part in key.split("."))
    if not all(path):
        raise ConfigError(f"override {text!r} has an empty field path; {_OVERRIDE_FORM}")
    raw = raw.strip()
    if raw == "null":
        return path, None
    try:
        parsed = tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError:
        return path, raw
    value = parsed.get("value")
    # "a\nb = 1" would parse into extra keys, and TOML dates are no config type: keep the text.
    if len(parsed) != 1 or isinstance(value, datetime.date | datetime.time):
        return path, raw
    return path, value


def _merge_into(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Deep-merge ``layer`` into ``base``; tables merge key by key, anything else replaces."""
    for key, value in layer.items():
        if isinstance(value, Mapping):
            if not isinstance(base.get(key), dict):
                base[key] = {}
            _merge_into(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _set_path(base: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = base
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    _merge_into(node, {path[-1]: value})


def _plugin_name(data: Mapping[str, Any], section: str, cls: type, name_field: str) -> Any:
    table = data.get(section)
    if isinstance(table, Mapping) and name_field in table:
        return table[name_field]
    return attrs.fields_dict(cls)[name_field].default


#: The buffer a run gets when no layer names one and it has several training envs: the
#: per-env vector buffer (one call per vector step, each env's steps together), if installed.
MULTI_ENV_BUFFER = "vector"


def _default_buffer(merged: dict[str, Any], spec_lookup: SpecLookup) -> None:
    """Name the vector buffer for multi-env runs that did not choose a buffer."""
    table = merged.get("buffer")
    if isinstance(table, Mapping) and "name" in table:
        return
    env = merged.get("env")
    num_envs = env.get("num_envs") if isinstance(env, Mapping) else None
    if num_envs is None:
        num_envs = attrs.fields_dict(EnvConfig)["num_envs"].default
    if not isinstance(num_envs, int) or num_envs <= 1:
        return
    try:
        spec_lookup("buffer", MULTI_ENV_BUFFER)
    except Exception:  # not installed: the base replay buffer serves any number of envs
        return
    merged.setdefault("buffer", {})
    if isinstance(merged["buffer"], dict):
        merged["buffer"]["name"] = MULTI_ENV_BUFFER


def build_config(
    algo_name: str,
    *,
    file_data: Mapping[str, Any] | None = None,
    overrides: Iterable[str | tuple[tuple[str, ...], Any]] = (),
    flags: Mapping[str, Any] | None = None,
    spec_lookup: SpecLookup,
) -> ExperimentConfig:
    """Resolve a run's config: section defaults < the algo spec's ``defaults`` < its
    ``env_defaults`` matching the env id < ``file_data`` < ``flags`` < ``overrides`` (later wins;
    tables merge key by key).

    ``flags`` is a nested dict of explicit keyword/CLI flags (``{"run": {"seed": 3}}``); leave
    out flags the user did not give, since a None value is taken as an explicit None.
    ``overrides`` are ``"section.field=value"`` strings or already-parsed ``(path, value)`` pairs.
    Every invalid key or value is reported in one ConfigError, one line per problem; unknown
    plugin names raise whatever ``spec_lookup`` raises.
    """
    algo_spec = spec_lookup("algo", algo_name)
    user: dict[str, Any] = {}
    for layer in (file_data or {}, flags or {}):
        _merge_into(user, layer)
    for override in overrides:
        path, value = parse_override(override) if isinstance(override, str) else override
        _set_path(user, tuple(path), value)
    merged: dict[str, Any] = {}
    _merge_into(merged, algo_spec.defaults)
    env_defaults = getattr(algo_spec, "env_defaults", None) or {}
    if env_defaults:
        env_id = _lookup_env_id(user, merged)
        for pattern, layer in env_defaults.items():
            if isinstance(env_id, str) and fnmatch.fnmatchcase(env_id, pattern):
                _merge_into(merged, layer)
    _merge_into(merged, user)
    given_name = merged.pop("algo_name", algo_name)
    if given_name != algo_name:
        raise ConfigError(
            f"$.algo_name: the config says {given_name!r} but the run is for {algo_name!r}; "
            "remove algo_name from the config or train the algorithm it names"
        )
    merged = {"algo_name": algo_name, **merged}

    # The plugins are known only now; look them up here so that an unknown name raises the
    # registry's own error rather than a line in the ConfigError.
    _default_buffer(merged, spec_lookup)
    buffer_name = _plugin_name(merged, "buffer", BufferConfig, "name")
    backend = _plugin_name(merged, "env", EnvConfig, "backend")
    labels = {"algo": f"algo ({algo_name})", "buffer": "buffer", "env": "env"}
    if isinstance(buffer_name, str):
        spec_lookup("buffer", buffer_name)
        labels["buffer"] = f"buffer ({buffer_name})"
    if isinstance(backend, str):
        spec_lookup("env", backend)
        labels["env"] = f"env ({backend})"

    try:
        with _using_lookup(spec_lookup):
            return converter.structure(merged, ExperimentConfig)
    except BaseValidationError as exc:
        raise ConfigError("\n".join(_error_lines(exc, "$", labels))) from None


def _lookup_env_id(*layers: Mapping[str, Any]) -> Any:
    """The env id the merged config will have: the first layer that sets it, else the default."""
    for layer in layers:
        env = layer.get("env")
        if isinstance(env, Mapping) and "id" in env:
            return env["id"]
    return attrs.fields_dict(EnvConfig)["id"].default


def structure_options(config_class: type, data: Mapping[str, Any], *, label: str) -> Any:
    """Build a plugin's config instance from keyword options (``make_buffer(..., alpha=0.6)``),
    checked like :func:`build_config` checks files; ``label`` names the options in messages,
    e.g. ``"buffer (prioritized)"``. Raises ConfigError with one ``$.field: ...`` line each."""
    try:
        return converter.structure(dict(data), config_class)
    except BaseValidationError as exc:
        raise ConfigError("\n".join(_error_lines(exc, "$", {"": label}))) from None


# --- writing back ------------------------------------------------------------------------------


def to_dict(config: ExperimentConfig) -> dict[str, Any]:
    """The flat user-facing form (plugin options inside their section, ``algo_name`` at the top),
    made of plain dicts, lists, scalars and None (fixed-length tuple fields stay tuples). TOML has
    no null: a TOML writer must leave out None values; JSON keeps them."""
    return converter.unstructure(config)


def write_config(config: ExperimentConfig, path: str | os.PathLike[str]) -> None:
    """Write the resolved config as JSON, atomically (a temp file then ``os.replace``)."""
    path = Path(path)
    try:
        text = json.dumps(to_dict(config), indent=2) + "\n"
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot write config to {path}: {exc}") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_config(path: str | os.PathLike[str], spec_lookup: SpecLookup) -> ExperimentConfig:
    """Read a config written by :func:`write_config` (or any file holding ``algo_name``)."""
    data = load_config_file(path)
    algo_name = data.pop("algo_name", None)
    if not isinstance(algo_name, str) or not algo_name:
        raise ConfigError(
            f"{path}: $.algo_name: expected the algorithm's registry name, got {algo_name!r}; "
            "a config written by write_config has it at the top level"
        )
    return build_config(algo_name, file_data=data, spec_lookup=spec_lookup)
