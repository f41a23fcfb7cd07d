"""Plugin machinery: the specs a plugin registers, the entry-point registries, the pluggy hook
specs and marker, and the per-run plugin manager.

Above ``contracts`` only. Nothing here imports torch, so listing plugins stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "BUFFER_PARTS",
    "FIRST_PARTY",
    "GROUPS",
    "NETWORK_PARTS",
    "PLUGIN_API_VERSION",
    "PLUGIN_FOLDERS",
    "TEMPLATE_DISTRIBUTIONS",
    "AlgoSpec",
    "BufferSpec",
    "EntryInfo",
    "EnvBackendSpec",
    "EnvFamilySpec",
    "LoggerSpec",
    "PluginSpec",
    "Registry",
    "RlblocksPluginManager",
    "canonical_distribution_name",
    "first_party_home",
    "get_registry",
    "hook_names",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "import_entry",
    "import_object",
    "install_hint",
    "make_plugin_manager",
    "reset_caches",
    "untrusted_module",
]

if TYPE_CHECKING:
    from rlblocks.plugins import _hookspecs as hookspecs
    from rlblocks.plugins._hookspecs import hookimpl, hookspec
    from rlblocks.plugins._imports import import_entry, untrusted_module
    from rlblocks.plugins._manager import RlblocksPluginManager, hook_names, make_plugin_manager
    from rlblocks.plugins._registry import (
        FIRST_PARTY,
        GROUPS,
        PLUGIN_FOLDERS,
        TEMPLATE_DISTRIBUTIONS,
        EntryInfo,
        Registry,
        canonical_distribution_name,
        first_party_home,
        get_registry,
        install_hint,
        reset_caches,
    )
    from rlblocks.plugins._spec import (
        BUFFER_PARTS,
        NETWORK_PARTS,
        PLUGIN_API_VERSION,
        AlgoSpec,
        BufferSpec,
        EnvBackendSpec,
        EnvFamilySpec,
        LoggerSpec,
        PluginSpec,
        import_object,
    )

__getattr__, __dir__ = attach(__name__, __file__)
