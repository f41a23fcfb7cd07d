"""Testing helpers for rlblocks and its plugins: pytest fixtures and conformance checks.

The pytest plugin (:mod:`rlblocks.testing.plugin`) is loaded automatically by pytest once rlblocks
is installed. The checks are imported lazily so that loading the plugin stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "check_vector_env": "rlblocks.testing.env_checks",
    "check_buffer": "rlblocks.testing.buffer_checks",
    "check_algorithm": "rlblocks.testing.algo_checks",
    "CrashAt": "rlblocks.testing.hooks",
}

__all__ = ["CrashAt", "check_algorithm", "check_buffer", "check_vector_env"]

if TYPE_CHECKING:
    from rlblocks.testing.algo_checks import check_algorithm
    from rlblocks.testing.buffer_checks import check_buffer
    from rlblocks.testing.env_checks import check_vector_env
    from rlblocks.testing.hooks import CrashAt


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlblocks.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
