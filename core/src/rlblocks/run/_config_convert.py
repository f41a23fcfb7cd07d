"""The cattrs converter of run configurations and the error lines it reports.

Strict scalars, unknown keys rejected with close matches, plugin options structured into the
config class their plugin's spec names; every problem becomes one line with its field path.
See :mod:`rlblocks.run`.
"""

import difflib
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, is_mapping, is_sequence
from cattrs.cols import list_structure_factory as _list_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, mapping_structure_factory

from rlblocks.contracts import ConfigError
from rlblocks.run._config_sections import (
    _PLUGIN_FIELD,
    _SECTION_NAMES,
    _SECTIONS,
    BufferConfig,
    EnvConfig,
    ExperimentConfig,
    SpecLookup,
    _NoOptions,
)

# --- errors raised inside structuring, turned into lines by _error_lines -----------------------


class _WrongType(TypeError):
    def __init__(self, expected: str, value: Any) -> None:
        hint = " (put it in quotes)" if expected == "str" and isinstance(value, int | float) else ""
        if expected == "an array" and isinstance(value, str) and value.strip()[:1] == "[":
            # '[a:B]' whose item is unquoted (or whose quotes the shell removed)
            items = [i.strip().strip("'\"") for i in value.strip().strip("[]").split(",")]
            fixed = ", ".join(f'"{i}"' for i in items if i)
            hint = (
                " (the array's items are strings, so quote each, and quote the whole setting "
                f"for the shell: --set 'FIELD=[{fixed}]')"
            )
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
        except (ValueError, TypeError) as exc:  # a check in the class's __attrs_post_init__
            errors.append(exc)
            inst = None
        finally:
            attrs.validators.set_disabled(was_disabled)
        if inst is not None:
            errors.extend(_validation_errors(inst))
        if errors:
            raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        return inst

    return structure


def _section_with_options(
    base: Callable[[Any, Any], Any], cls: type, value: Mapping[str, Any], own: tuple[str, ...],
    errors: list[Exception], options: Any,
) -> Any:
    """Structure a section's own fields, raise every error collected so far (its plugins'
    options included) at once, else attach the plugin ``options``."""
    try:
        inst = base({k: v for k, v in value.items() if k in own}, cls)
    except ClassValidationError as exc:
        errors.extend(exc.exceptions)
    if errors:
        raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
    inst.options = options
    return inst


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
        return _section_with_options(base, cls, value, own, errors, options)

    return structure


def _buffer_section(value: Any, _type: Any) -> BufferConfig:
    """Structure the buffer section: its own fields, then the options of every part it names
    (layout, sampler, relabeller, writer), all read from the same flat table."""
    cls = BufferConfig
    base = _attrs_hook(cls)
    own = tuple(a.name for a in attrs.fields(cls) if a.name != "options")
    if not isinstance(value, Mapping):
        raise _WrongType("a table", value)
    names = {k: value.get(k, attrs.fields_dict(cls)[k].default)
             for k in ("name", "sampler", "relabel", "writer")}
    if not all(v is None or isinstance(v, str) for v in names.values()):
        # the section's own hook reports the bad name; the rest cannot be checked without it
        return base({k: v for k, v in value.items() if k in own}, cls)
    lookup = _spec_lookup.get()
    if lookup is None:
        raise ConfigError(
            "plugin options need a spec lookup; build configs with build_config or read_config"
        )
    from rlblocks.replay import resolve_part_names

    parts = resolve_part_names(names["name"], names["sampler"], names["relabel"],
                               names["writer"], lookup)
    option_cls = {kind: lookup("buffer", name).config for kind, name in parts.items()}
    owner: dict[str, str] = {}
    for kind, ocls in option_cls.items():
        for a in attrs.fields(ocls) if ocls else ():
            if not a.init:
                continue
            if a.name in own or a.name in owner:
                other = owner.get(a.name, "the buffer section")
                raise ConfigError(
                    f"buffer part {parts[kind]!r} has a config field {a.name!r} that clashes with "
                    f"{other}; the part must rename it"
                )
            owner[a.name] = f"buffer part {parts[kind]!r}"
    errors: list[Exception] = [
        _noted(_UnknownKey(k, (*own, *owner)), k, None)
        for k in value
        if k not in own and k not in owner
    ]
    options: dict[str, Any] = {}
    for kind, ocls in option_cls.items():
        if ocls is None:
            continue
        fields = {a.name for a in attrs.fields(ocls) if a.init}
        try:
            options[kind] = converter.structure(
                {k: v for k, v in value.items() if k in fields}, ocls
            )
        except ClassValidationError as exc:
            errors.extend(exc.exceptions)
    return _section_with_options(base, cls, value, own, errors, options or None)


def _unstructure_buffer(inst: BufferConfig) -> dict[str, Any]:
    """The flat table: the section's own fields, then every part's options."""
    out = {a.name: converter.unstructure(getattr(inst, a.name))
           for a in attrs.fields(BufferConfig) if a.name != "options"}
    for part in (inst.options or {}).values():
        if part is not None:
            out.update(converter.unstructure(part))
    return out


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
converter.register_structure_hook(BufferConfig, _buffer_section)
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
converter.register_unstructure_hook(BufferConfig, _unstructure_buffer)
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
    if len(exc.args) > 1 and isinstance(exc.args[0], str):
        # attrs' own validators (in_, instance_of...) raise (message, attribute, ...): the
        # message alone, not the tuple with the attribute's repr
        return exc.args[0]
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
    text = _describe(exc)
    if "--set 'FIELD=" in text:  # name the field in the suggested setting
        text = text.replace("--set 'FIELD=", f"--set '{path.removeprefix('$.')}=")
    return [f"{path}: {text}"]
