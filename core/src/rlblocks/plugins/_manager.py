"""The per-run pluggy plugin manager: hook specs added, hook objects registered and checked."""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Iterable

import pluggy

from rlblocks.contracts import ConfigError
from rlblocks.plugins import hookspecs

PROJECT = "rlblocks"
_PREFIX = "rlblocks_"


def hook_names() -> list[str]:
    """The names of every hook rlblocks defines, sorted."""
    return sorted(n for n in vars(hookspecs) if n.startswith(_PREFIX))


def _describe(plugin: object) -> str:
    if inspect.ismodule(plugin):
        return f"module {plugin.__name__}"
    if inspect.isclass(plugin):
        return f"class {plugin.__module__}.{plugin.__qualname__}"
    return f"{type(plugin).__module__}.{type(plugin).__qualname__} object"


def _unknown_hook_message(plugin: object, hook: str) -> str:
    known = hook_names()
    # Compare without the shared prefix, which would make every hook look alike.
    bare = {name.removeprefix(_PREFIX): name for name in known}
    matches = difflib.get_close_matches(hook.removeprefix(_PREFIX), list(bare), n=3, cutoff=0.6)
    close = [bare[m] for m in matches]
    lines = [f"{_describe(plugin)} implements {hook!r}, which is not an rlblocks hook."]
    if close:
        lines.append(f"Did you mean: {', '.join(close)}?")
    lines.append(f"The hooks are: {', '.join(known)}.")
    lines.append("Rename the method, or mark it @hookimpl(optionalhook=True) if it is meant for a "
                 "hook another plugin defines.")
    return "\n".join(lines)


class RlblocksPluginManager(pluggy.PluginManager):
    """A :class:`pluggy.PluginManager` for the ``rlblocks`` project that checks each plugin as it
    is registered.

    Like pytest with ``pytest_*``, every ``rlblocks_*`` function or method counts as a hook
    implementation even without ``@hookimpl``, so a misspelled hook name is caught instead of
    silently never being called. Registration errors become
    :class:`~rlblocks.contracts.ConfigError`.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self.add_hookspecs(hookspecs)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if (
            opts is None
            and name.startswith(_PREFIX)
            and inspect.isroutine(getattr(plugin, name, None))
        ):
            opts = pluggy.HookimplOpts(
                wrapper=False,
                hookwrapper=False,
                optionalhook=False,
                tryfirst=False,
                trylast=False,
                specname=None,
            )
        return opts

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin``; raise :class:`ConfigError` (and leave nothing registered) when it
        implements an unknown hook or declares arguments a hook does not have."""
        try:
            plugin_name = super().register(plugin, name)
        except pluggy.PluginValidationError as exc:
            self._forget(plugin)
            raise ConfigError(self._validation_message(plugin, exc)) from exc
        for caller in self.get_hookcallers(plugin) or ():
            if caller.has_spec():
                continue
            mine = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
            if any(not impl.optionalhook for impl in mine):
                self._forget(plugin)
                raise ConfigError(_unknown_hook_message(plugin, caller.name))
        return plugin_name

    def check_pending(self) -> None:
        """Raise :class:`ConfigError` if any registered plugin implements an unknown hook."""
        try:
            super().check_pending()
        except pluggy.PluginValidationError as exc:
            hook = next(
                (c.name for c in self.get_hookcallers(exc.plugin) or () if not c.has_spec()),
                "an unknown hook",
            )
            raise ConfigError(_unknown_hook_message(exc.plugin, hook)) from exc

    def _forget(self, plugin: object) -> None:
        if self.is_registered(plugin):
            self.unregister(plugin)

    def _validation_message(self, plugin: object, exc: pluggy.PluginValidationError) -> str:
        match = re.search(r"hook '(\w+)'", str(exc))
        detail = str(exc).replace("\n", "; ")
        message = f"invalid hook implementation in {_describe(plugin)}: {detail}"
        if match and match.group(1) in hook_names():
            spec = getattr(hookspecs, match.group(1))
            message += f".\nThe hook is {match.group(1)}{inspect.signature(spec)}"
        return message


def make_plugin_manager(plugins: Iterable[object] = ()) -> pluggy.PluginManager:
    """A fresh plugin manager for one run, with rlblocks' hook specs and ``plugins`` registered.

    Each plugin is any object with ``rlblocks_*`` hook functions or methods (an instance, a module,
    a class of static methods). Raises :class:`ConfigError` when one implements an unknown
    (misspelled) hook or takes an argument its hook does not pass. Plugins registered later with
    ``manager.register(obj)`` are checked the same way.
    """
    manager = RlblocksPluginManager()
    for plugin in plugins:
        manager.register(plugin)
        if not manager.get_hookcallers(plugin):
            manager.unregister(plugin)
            raise ConfigError(
                f"the hook object {_describe(plugin)} implements no rlblocks hook, so it would "
                "never be called; give it methods named after the hooks "
                f"({', '.join(hook_names()[:3])}, ...: rlblocks.plugins.hookspecs lists them), or "
                "leave it out"
            )
    manager.check_pending()
    return manager
