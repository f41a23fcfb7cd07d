"""rlblocks' pytest plugin (entry point ``pytest11``): fixtures for testing plugins.

Loaded in every pytest session where rlblocks is installed, so it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from rlblocks.plugins import GROUPS, PluginSpec, Registry, get_registry, reset_caches


@pytest.fixture
def rlblocks_registries() -> Iterator[dict[str, Registry]]:
    """Every registry, keyed by kind, scoped to the test: in-process additions and removals are
    undone afterwards, and metadata caches are dropped before and after."""
    reset_caches()
    with contextlib.ExitStack() as stack:
        registries = {kind: stack.enter_context(get_registry(kind).scoped()) for kind in GROUPS}
        yield registries
    reset_caches()


@pytest.fixture
def rlblocks_add_plugin(
    rlblocks_registries: dict[str, Registry],
) -> Callable[..., PluginSpec]:
    """``add(spec, distribution=None)``: register a spec in its kind's registry for one test."""

    def add(spec: PluginSpec, distribution: str | None = None) -> PluginSpec:
        if spec.kind not in rlblocks_registries:
            raise TypeError(f"{type(spec).__name__} has no registry (kind {spec.kind!r})")
        return rlblocks_registries[spec.kind].add(spec, distribution=distribution)

    return add
