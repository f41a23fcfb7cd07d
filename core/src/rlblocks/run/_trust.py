"""The trust rule for what a run directory's config names beyond the run itself.

A run directory is data: loading, evaluating, describing, plotting, verifying or resuming it
must not run code of whoever wrote its ``config.json``, write where that file says outside the
run directory, or contact a server that file names. Three kinds of setting reach out, and
each is used only as follows:

* Code. Every import path a config can hold — the env id (``module:EnvId``), the env wrappers,
  a buffer part's functions (a spec's ``import_fields``: HER's ``compute_reward``) and
  ``algo.encoder`` — is imported only when its module is imported already, belongs to rlblocks,
  its installed plugins or gymnasium, or the user trusts the run (``trust_imports=True``,
  ``--trust-imports``). A wrapper's keyword arguments that name a file or folder
  (``RecordVideo``'s ``video_folder``: names ending in ``folder``, ``dir``, ``path``,
  ``file``...) need that trust too, as the wrapper, trusted code, would write wherever they say.
  :func:`check_run_imports` applies it (load, eval, resume).
* Files. A folder or file the run would write (``buffer.path`` of a memory-mapped buffer, a
  plugin's ``path_fields``: W&B's ``dir``) must lie inside the run directory, reached without
  a symbolic link, unless the user gives the setting again (``--set buffer.path=...``) or
  trusts the run. (``buffer.dataset`` is only read, never written, and a resume refuses a file
  whose SHA-256 differs from the one its checkpoint recorded.)
* Endpoints. A plugin's ``endpoint_fields`` (MLflow's ``tracking_uri``, W&B's ``mode``,
  ``entity`` and ``project``, a Ray cluster's ``address`` and ``init_kwargs``) set in the
  config are used only when the user gives them again or trusts the run; left unset, the plugin
  falls back on the user's own defaults (environment variables, a store inside the run).

Only ``resume`` builds loggers, env backends and buffers from a run's config, so only it checks
files and endpoints (:func:`check_run_reach`); ``load``, ``eval``, ``describe``, ``plot`` and
``verify`` write nothing outside the run and contact nothing. A refused setting is one line
naming the field, its value and both ways on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from rlblocks.contracts import ConfigError
from rlblocks.plugins import untrusted_module
from rlblocks.run import _config as cfg
from rlblocks.run._advice import option, trust_advice
from rlblocks.run._compose import check_env_id, logger_configs, spec_lookup
from rlblocks.run._networks import check_network_imports

__all__ = ["check_run_imports", "check_run_reach", "trust_problems"]


def _refuse(field: str, path: Any, module: str) -> ConfigError:
    return ConfigError(
        f"{field}: {path!r} names code in the module {module!r}, and importing it runs that "
        f"code; {trust_advice(module)}"
    )


def check_run_imports(config: Any, trusted: bool, env_id: bool = True) -> None:
    """Refuse, before anything is built, every import path of a run directory's ``config`` that
    the trust rule does not allow (one line naming the field, the path and the fix). The env id
    is checked (and, trusted, imported) unless ``env_id`` is False (a factory replaces it)."""
    if env_id:
        check_env_id(config.env.id, trusted=trusted)
    if trusted:
        return
    for field in ("wrappers", "train_wrappers"):
        for item in getattr(config.env, field):
            path = item.get("path") if isinstance(item, Mapping) else item
            module = untrusted_module(str(path))
            if module is not None:
                raise _refuse(f"env.{field}", path, module)
            kwargs = item.get("kwargs") if isinstance(item, Mapping) else None
            for key, value in (kwargs or {}).items():
                if _names_a_file(str(key)):  # trusted code, told where to write by the file
                    trust = option("trust_imports=True", "--trust-imports")
                    raise ConfigError(
                        f"env.{field}: {path!r} takes {key}={value!r} from the run's "
                        "config.json, a file or folder the wrapper would write or read "
                        f"wherever it says; pass {trust} if you trust this run"
                    )
    # options are keyed by the part's role ("relabel": HER's options); the role's field names it
    for role, options in (config.buffer.options or {}).items():
        name = getattr(config.buffer, str(role), None)
        try:
            fields = spec_lookup("buffer", str(name)).import_fields
        except Exception:  # an unknown part is reported where the buffer is built
            continue
        for field in fields:
            value = (
                options.get(field)
                if isinstance(options, Mapping)
                else getattr(options, field, None)
            )
            if isinstance(value, str):
                module = untrusted_module(value)
                if module is not None:
                    raise _refuse(f"buffer.{field}", value, module)
    check_network_imports(config, trusted=False)


#: how the keyword arguments that name a file or folder end (``video_folder``, ``log_dir``,
#: ``path``, ``xml_file``): a wrapper's are refused from an untrusted run's config
_FILE_WORDS = ("folder", "dir", "directory", "path", "file", "filename")


def _names_a_file(key: str) -> bool:
    return key.lower().rsplit("_", 1)[-1] in _FILE_WORDS


def check_run_reach(
    config: Any,
    run_dir: str | os.PathLike[str],
    trusted: bool,
    overrides: Iterable[Any] = (),
) -> None:
    """Refuse, before anything is built, a resume of ``run_dir`` whose ``config`` would write
    outside the run directory or contact an endpoint on the word of its ``config.json``: each
    file setting must lie inside ``run_dir`` (no symbolic link on the way) and each endpoint
    setting must be unset, unless the user gave that setting again in ``overrides`` (the
    resume's ``--set``) or ``trusted``. One line names the field, its value and the fixes."""
    if trusted:
        return
    given = [cfg.parse_override(o) if isinstance(o, str) else o for o in overrides]
    for path, value, kind in _reaching_settings(config):
        if any(_gives(p, v, path) for p, v in given):
            continue
        field = ".".join(path)
        again = option(f"overrides=['{field}=...']", f"--set {field}=...")
        trust = option("trust_imports=True", "--trust-imports")
        if kind == "endpoint":
            raise ConfigError(
                f"{field}: {value!r} comes from the run's config.json, and resuming would "
                f"contact it; give it again yourself ({again}), or pass {trust} if you trust "
                "this run"
            )
        problem = _outside(str(value), Path(run_dir))
        if problem:
            raise ConfigError(
                f"{field}: {value!r} {problem}, and resuming would write there on the word of "
                f"the run's config.json; give it again yourself ({again}), or pass {trust} if "
                "you trust this run"
            )


def _reaching_settings(config: Any) -> Iterator[tuple[tuple[str, ...], Any, str]]:
    """``(field path, value, "path" | "endpoint")`` of every setting of ``config`` that names
    a place outside the run: the memory-mapped buffer's folder, and the ``path_fields`` and
    ``endpoint_fields`` its buffer parts, env backend and loggers declare and it sets."""
    buffer = config.buffer
    if buffer.storage == "memmap" and buffer.path is not None:
        yield ("buffer", "path"), buffer.path, "path"
    try:
        from rlblocks.replay import resolve_part_names

        parts = resolve_part_names(
            buffer.name, buffer.sampler, buffer.relabel, buffer.writer, lookup=spec_lookup
        )
    except Exception:  # an unknown part is reported where the buffer is built
        parts = {}
    for role, options in (buffer.options or {}).items():
        if role in parts:
            spec = spec_lookup("buffer", parts[role])
            yield from _declared(spec, options, ("buffer",))
    yield from _declared(spec_lookup("env", config.env.backend), config.env.options, ("env",))
    for name, options in logger_configs(config.run).items():
        spec = spec_lookup("logger", name)
        yield from _declared(spec, options, ("run", "logger_options", name))


def _declared(
    spec: Any, options: Any, prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any, str]]:
    """The settings ``options`` (an instance of ``spec.config``) gives to the fields ``spec``
    declares as paths or endpoints; a field left at its default names nothing."""
    if options is None or not attrs.has(type(options)):
        return
    defaults = attrs.fields_dict(type(options))
    for kind, names in (("path", spec.path_fields), ("endpoint", spec.endpoint_fields)):
        for name in names:
            value = getattr(options, name, None)
            default = defaults[name].default if name in defaults else None
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if value is not None and value != default:
                yield (*prefix, name), value, kind


def _gives(path: tuple[str, ...], value: Any, field: tuple[str, ...]) -> bool:
    """Whether the override ``path = value`` sets ``field`` (itself, or a table holding it)."""
    path = tuple(path)
    if path[: len(field)] == field:
        return True
    if field[: len(path)] != path:
        return False
    for key in field[len(path) :]:
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def _outside(value: str, run_dir: Path) -> str:
    """Empty when ``value`` (relative paths from the working directory, as the run reads them)
    lies inside ``run_dir`` with no symbolic link between the two; else what is wrong."""
    root = Path(os.path.abspath(run_dir))
    target = Path(os.path.abspath(value))
    if target != root and root not in target.parents:
        return f"is outside the run directory {run_dir}"
    for part in (target, *target.parents):
        if part == root:
            break
        if part.is_symlink():
            return f"reaches through the symbolic link {part} inside the run directory"
    return ""


def trust_problems(run_dir: str | os.PathLike[str], trusted: bool = False) -> list[str]:
    """What ``load``, ``eval`` or ``resume`` would refuse in ``run_dir`` on the trust rule (its
    config naming code to import, a place outside the run to write, an endpoint to contact; a
    symbolic link among the run's own entries), one line each; empty when nothing is. Nothing
    is imported, written or contacted: ``rlblocks verify`` reports these beside damaged
    files."""
    from rlblocks.contracts import RlblocksError
    from rlblocks.run._rundir import refuse_symlinks

    run_dir = Path(run_dir)
    problems: list[str] = []
    try:
        config = cfg.read_config(run_dir / "config.json", spec_lookup)
    except RlblocksError as exc:  # a damaged config.json is reported as damaged already
        return [f"config.json cannot be read as a config: {exc}"]
    for check in (
        lambda: check_run_imports(config, trusted=trusted),
        lambda: check_run_reach(config, run_dir, trusted=trusted),
        lambda: refuse_symlinks(run_dir),
    ):
        try:
            check()
        except RlblocksError as exc:
            problems.append(str(exc))
    return problems
