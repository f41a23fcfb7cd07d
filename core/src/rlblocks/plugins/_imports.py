"""Config entries that name Python objects: ``"module:Name"`` or ``{path, kwargs}`` tables."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rlblocks.contracts import ConfigError

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
