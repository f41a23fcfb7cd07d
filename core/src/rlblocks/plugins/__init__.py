"""Plugin machinery: specs, entry-point registries, pluggy hook specs and the per-run manager.

``hookimpl`` (the marker for hook implementations) is imported lazily, so listing plugins does not
need pluggy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["hookimpl"]

if TYPE_CHECKING:
    from rlblocks.plugins.hookspecs import hookimpl


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        from rlblocks.plugins.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'rlblocks.plugins' has no attribute {name!r}")
