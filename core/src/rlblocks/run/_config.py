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

The sections are defined in ``rlblocks.run`` and the converter with its error lines
in ``rlblocks.run``; import them from here.
"""

import copy
import datetime
import fnmatch
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from cattrs.errors import BaseValidationError

from rlblocks.contracts import ConfigError
from rlblocks.run._config_convert import _error_lines, _using_lookup, converter
from rlblocks.run._config_sections import (
    DEFAULT_LOGGERS,
    BufferConfig,
    EnvConfig,
    ExperimentConfig,
    RunConfig,
    SpecLookup,
    TrainerConfig,
)

__all__ = [
    "DEFAULT_LOGGERS",
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


# --- files and overrides -----------------------------------------------------------------------

_OVERRIDE_FORM = "write it as section.field=value, e.g. algo.lr=3e-4 or buffer.name=prioritized"


#: How deep tables and arrays may nest in a config (a run's own config nests four levels); a
#: deeper one is refused before anything recurses through it
MAX_DEPTH = 32


def _depth_problem(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests dicts and lists more than ``limit`` levels deep (walked without
    recursion, so any depth is measured safely)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _too_deep(where: str) -> ConfigError:
    return ConfigError(
        f"{where}: tables and arrays nest more than {MAX_DEPTH} levels deep; a config nests "
        "a few levels (section, field, a table of options): flatten it"
    )


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
        except RecursionError:
            raise _too_deep(str(path)) from None
    else:
        try:
            data = json.loads(text)
        except RecursionError:
            raise _too_deep(str(path)) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg} "
                f"(at line {exc.lineno}, column {exc.colno})"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}: the top level must be an object of sections, got {type(data).__name__}"
            )
    if _depth_problem(data):
        raise _too_deep(str(path))
    return data


#: list fields whose overrides add up: ``--set 'env.wrappers=["a:A"]' --set
#: 'env.wrappers=["b:B"]'`` wraps in A, then B (the first override still replaces the list a
#: config file gives, as every override does)
APPENDING_FIELDS = frozenset({("env", "wrappers"), ("env", "train_wrappers")})


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split ``"algo.lr=3e-4"`` into ``(("algo", "lr"), 0.0003)``.

    The value is read as a TOML value (numbers, ``true``/``false``, quoted strings, arrays,
    inline tables), else as a JSON object or array; ``null`` gives None; anything else is kept
    as a bare string
    (``buffer.name=prioritized``).
    """
    key, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"override {text!r} has no '='; {_OVERRIDE_FORM}")
    path = tuple(part.strip() for part in key.split("."))
    if not all(path):
        raise ConfigError(f"override {text!r} has an empty field path; {_OVERRIDE_FORM}")
    if len(path) > MAX_DEPTH:
        raise _too_deep(f"override {key[:40].strip()}...")
    raw = raw.strip()
    if raw == "null":
        return path, None
    try:
        path, value = _parse_value(path, raw)
    except RecursionError:
        raise _too_deep(f"override {key.strip()}") from None
    if _depth_problem(value):
        raise _too_deep(f"override {key.strip()}")
    return path, value


def _parse_value(path: tuple[str, ...], raw: str) -> tuple[tuple[str, ...], Any]:
    try:
        parsed = tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError:
        if raw[:1] in "{[":  # JSON objects and arrays too: '{"continuous": true}'
            try:
                return path, json.loads(raw)
            except json.JSONDecodeError:
                pass
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


def _drop_defaults_of_unused_parts(
    merged: dict[str, Any], user: Mapping[str, Any], spec_lookup: SpecLookup
) -> None:
    """Drop buffer options that only the algo spec's defaults set, for a part the user
    switched off: Rainbow's defaults tune the prioritized sampler (``alpha``, ``beta``...);
    ``buffer.sampler=uniform`` must then simply work, not report options the user never
    wrote. Options the user wrote are kept (and reported if no part takes them)."""
    table = merged.get("buffer")
    if not isinstance(table, dict):
        return
    user_table = user.get("buffer")
    written = set(user_table) if isinstance(user_table, Mapping) else set()
    own = {a.name for a in attrs.fields(BufferConfig)}
    candidates = [k for k in table if k not in own and k not in written]
    if not candidates:
        return
    from rlblocks.replay import resolve_part_names

    try:
        parts = resolve_part_names(
            str(table.get("name", "replay")), table.get("sampler"), table.get("relabel"),
            table.get("writer"), lookup=spec_lookup,
        )  # fmt: skip
    except Exception:  # a bad combination is reported where the section is structured
        return
    accepted: set[str] = set()
    for part in parts.values():
        config = getattr(spec_lookup("buffer", part), "config", None)
        if config is not None:
            accepted |= {a.name for a in attrs.fields(config)}
    for key in candidates:
        if key not in accepted:
            del table[key]


def build_config(
    algo_name: str,
    *,
    file_data: Mapping[str, Any] | None = None,
    overrides: Iterable[str | tuple[tuple[str, ...], Any]] = (),
    flags: Mapping[str, Any] | None = None,
    spec_lookup: SpecLookup,
    _blame: bool = True,
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
    for where, layer in (("config", file_data or {}), ("flags", flags or {})):
        if _depth_problem(layer):
            raise _too_deep(where)
        _merge_into(user, layer)
    appended: dict[tuple[str, ...], list[Any]] = {}
    for override in overrides:
        path, value = parse_override(override) if isinstance(override, str) else override
        if len(tuple(path)) > MAX_DEPTH or _depth_problem(value):
            raise _too_deep(f"override {'.'.join(map(str, tuple(path)[:4]))}")
        path = tuple(path)
        if path in APPENDING_FIELDS and isinstance(value, list):
            # a second --set of the wrappers adds to the first (a config file's are replaced)
            value = appended[path] = [*appended.get(path, []), *value]
        _set_path(user, path, value)
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
    _drop_defaults_of_unused_parts(merged, user, spec_lookup)
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
        problems = "\n".join(_error_lines(exc, "$", labels))
    own = None
    if _blame:
        own = problems if not user else _own_defaults_problems(algo_name, merged, spec_lookup)
    if own is not None:
        raise ConfigError(
            f"the algo plugin {algo_name!r} brings invalid defaults (its spec's defaults or "
            "env_defaults, not your config; tell the plugin's authors):\n" + own
        )
    raise ConfigError(problems)


def _own_defaults_problems(
    algo_name: str, merged: Mapping[str, Any], spec_lookup: SpecLookup
) -> str | None:
    """The problems of an algorithm's defaults alone (for the run's env id), or None: what a
    failing config owes to the plugin rather than to the user."""
    env = merged.get("env")
    env_id = env.get("id") if isinstance(env, Mapping) else None
    try:
        build_config(algo_name, spec_lookup=spec_lookup, _blame=False,
                     overrides=[(("env", "id"), env_id)] if isinstance(env_id, str) else ())
    except ConfigError as exc:
        text = str(exc)
        return None if text.startswith("$.env.id") else text
    return None


def _lookup_env_id(*layers: Mapping[str, Any]) -> Any:
    """The env id the merged config will have: the first layer that sets it, else the default."""
    for layer in layers:
        env = layer.get("env")
        if isinstance(env, Mapping) and "id" in env:
            return env["id"]
    return attrs.fields_dict(EnvConfig)["id"].default


def structure_options(
    config_class: type, data: Mapping[str, Any], *, label: str, root: str = "$"
) -> Any:
    """Build a plugin's config instance from keyword options (``make_buffer(..., alpha=0.6)``),
    checked like :func:`build_config` checks files; ``label`` names the options in messages,
    e.g. ``"buffer (prioritized)"``, and ``root`` is where they sit in a run's config.
    Raises ConfigError with one ``<root>.field: ...`` line each."""
    try:
        return converter.structure(dict(data), config_class)
    except BaseValidationError as exc:
        raise ConfigError("\n".join(_error_lines(exc, root, {"": label}))) from None


# --- writing back ------------------------------------------------------------------------------


def to_dict(config: ExperimentConfig) -> dict[str, Any]:
    """The flat user-facing form (plugin options inside their section, ``algo_name`` at the top),
    made of plain dicts, lists, scalars and None (fixed-length tuple fields stay tuples). TOML has
    no null: a TOML writer must leave out None values; JSON keeps them."""
    return converter.unstructure(config)


def write_config(config: ExperimentConfig, path: str | os.PathLike[str]) -> None:
    """Write the resolved config as JSON, atomically, with a checksum sidecar
    (``config.json.sha256``) that :func:`read_config` checks."""
    from rlblocks.run._checkpoint import write_verified

    path = Path(path)
    try:
        text = json.dumps(to_dict(config), indent=2) + "\n"
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot write config to {path}: {exc}") from exc
    write_verified(path, lambda fh: fh.write(text), "w")


def read_config(path: str | os.PathLike[str], spec_lookup: SpecLookup) -> ExperimentConfig:
    """Read a config written by :func:`write_config` (or any file holding ``algo_name``);
    one whose checksum sidecar disagrees with it is refused (CheckpointError)."""
    from rlblocks.run._checkpoint import check_file

    check_file(path)
    data = load_config_file(path)
    algo_name = data.pop("algo_name", None)
    if not isinstance(algo_name, str) or not algo_name:
        raise ConfigError(
            f"{path}: $.algo_name: expected the algorithm's registry name, got {algo_name!r}; "
            "a config written by write_config has it at the top level"
        )
    return build_config(algo_name, file_data=data, spec_lookup=spec_lookup)
