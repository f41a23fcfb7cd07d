"""Config entries that name Python objects: ``"module:Name"`` or ``{path, kwargs}`` tables."""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Mapping
from typing import Any

from rlblocks.contracts import ConfigError
from rlblocks.plugins._registry import GROUPS, get_registry

#: modules of rlblocks before its 1.0 layout whose classes config files name (``env.wrappers``
#: of Atari runs), and the face that has them now: a run directory written before keeps working
MOVED_MODULES = {"rlblocks.atari": "rlblocks.run", "rlblocks.envs": "rlblocks.run"}


def import_entry(item: Any, where: str) -> tuple[Any, dict[str, Any]]:
    """The object a config entry names and its kwargs; a ConfigError naming ``where`` (the
    config field) when it cannot be imported."""
    path = item["path"] if isinstance(item, Mapping) else item
    kwargs = dict(item.get("kwargs", {})) if isinstance(item, Mapping) else {}
    module, _, name = str(path).partition(":")
    module = MOVED_MODULES.get(module, module)
    try:
        return getattr(importlib.import_module(module), name), kwargs
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import {path!r} ({exc})") from exc


#: packages whose modules a config may name without trust: rlblocks and the env API it builds on
#: (importing them runs only code the user installed to run rlblocks at all)
TRUSTED_PACKAGES = ("rlblocks", "gymnasium")


@functools.cache
def _plugin_packages() -> frozenset[str]:
    """The top-level packages of the installed rlblocks plugins (from their entry points)."""
    roots = set()
    for kind in GROUPS:
        for entry in get_registry(kind).entries():
            roots.add(entry.value.partition(":")[0].split(".")[0])
    return frozenset(roots)


def untrusted_module(path: str) -> str | None:
    """The module an import path (``"package.module:name"``) names when importing it would run
    code that the user has not vouched for; None when it may be imported."""
    module = str(path).partition(":")[0]
    root = module.split(".")[0]
    if module in sys.modules or root in TRUSTED_PACKAGES or root in _plugin_packages():
        return None
    return module
