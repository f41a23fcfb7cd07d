"""Entry-point registries: one per component kind, each resolving a name to a plugin.

A plugin distribution declares an entry point in one of four groups, pointing at a spec object in
its import-light ``_spec.py``::

    [project.entry-points."rlblocks.algos"]
    ppo = "rlblocks_algo_ppo._spec:PPO"

A registry answers in three tiers, each importing more than the last:

0. :meth:`Registry.entries` / :meth:`Registry.names` read installed metadata only. They import no
   plugin code, never import torch, and work while a broken plugin is installed.
1. :meth:`Registry.spec` imports the plugin's ``_spec`` module and checks the object it names.
2. :meth:`Registry.load` imports the implementation the spec points at.

Names can be qualified with a distribution, ``"ppo@rlblocks-algo-ppo"``, to pick one of two
distributions that register the same name. Notebooks and tests register specs in-process with
:meth:`Registry.add`, optionally inside :meth:`Registry.scoped`.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.metadata
import re
import sys
from collections.abc import Iterator
from typing import Literal

import attrs
from attrs import frozen

from rlblocks.contracts import DuplicateComponentError, PluginLoadError, UnknownComponentError
from rlblocks.plugins._spec import PLUGIN_API_VERSION, PluginSpec

#: Component kind -> entry-point group.
GROUPS: dict[str, str] = {
    "algo": "rlblocks.algos",
    "buffer": "rlblocks.buffers",
    "env": "rlblocks.envs",
    "logger": "rlblocks.loggers",
    "family": "rlblocks.env_families",
}

#: Names of first-party plugins, used to tell a user which distribution to install. Each lives in
#: the distribution ``rlblocks-<kind>-<name>`` (underscores become hyphens), whose folder in the
#: rlblocks repository is ``plugins/<kind>s/<name>`` (:data:`PLUGIN_FOLDERS`).
FIRST_PARTY: dict[str, frozenset[str]] = {
    "algo": frozenset(
        {"dqn", "reinforce", "a2c", "ppo", "npg", "trpo", "ddpg", "td3", "sac", "redq",
         "crossq", "tqc",
         "discrete-sac", "c51", "rainbow", "qrdqn", "iqn", "fqf", "bdq", "r2d2", "rppo", "ippo",
         "mappo", "td3bc", "cql", "discrete-cql", "bc", "gail", "bcq", "discrete-bcq",
         "iql", "crr", "awac", "qmix", "vdn", "maddpg", "masac", "psrl"}
    ),
    "buffer": frozenset({"vector", "prioritized", "cached", "her", "prioritized-sequence"}),
    "env": frozenset({"dummy", "subproc", "shmem", "ray", "envpool"}),
    "logger": frozenset({"tensorboard", "csv", "mlflow", "wandb"}),
    "family": frozenset({"pettingzoo"}),
}
#: First-party components that live in a distribution not named after them: (kind, name) of
#: the distribution's own component.
_FIRST_PARTY_HOME: dict[tuple[str, str], tuple[str, str]] = {
    ("buffer", "prioritized-sequence"): ("algo", "r2d2"),  # R2D2's prioritized windows
}
#: The folder of each kind's first-party distributions in the rlblocks repository.
PLUGIN_FOLDERS: dict[str, str] = {
    "algo": "plugins/algos",
    "buffer": "plugins/buffers",
    "env": "plugins/envs",
    "logger": "plugins/loggers",
    "family": "plugins/families",
}
#: Distributions that are templates to copy, not components to use: ``rlblocks list`` hides
#: their components unless asked for everything (``--all``); a copy made with
#: ``contrib/plugin-template/new_plugin.py`` has its own name and is listed.
TEMPLATE_DISTRIBUTIONS: frozenset[str] = frozenset({"rlblocks-algo-softq"})

Origin = Literal["entry-point", "in-process"]


#: the modules of rlblocks before its 1.0 layout (plugin API 1): a plugin whose spec imports one
#: was built for plugin API 1, and is refused by name
API_1_MODULES = frozenset(
    {
        "rlblocks._advice",
        "rlblocks._buffer_files",
        "rlblocks._buffer_tree",
        "rlblocks._config_convert",
        "rlblocks._config_sections",
        "rlblocks._imports",
        "rlblocks._spec",
        "rlblocks.agent",
        "rlblocks.arraytree",
        "rlblocks.async_collector",
        "rlblocks.atari",
        "rlblocks.auto_backend",
        "rlblocks.batch",
        "rlblocks.buffer",
        "rlblocks.checkpoint",
        "rlblocks.collector",
        "rlblocks.compose",
        "rlblocks.config",
        "rlblocks.console",
        "rlblocks.cuda_graph",
        "rlblocks.distributional",
        "rlblocks.distributions",
        "rlblocks.env_families",
        "rlblocks.env_state",
        "rlblocks.envs",
        "rlblocks.errors",
        "rlblocks.experiment",
        "rlblocks.layouts",
        "rlblocks.multiagent",
        "rlblocks.natural_gradient",
        "rlblocks.nets",
        "rlblocks.nets.actors",
        "rlblocks.nets.critics",
        "rlblocks.nets.encoders",
        "rlblocks.nets.heads",
        "rlblocks.nets.mlp",
        "rlblocks.nets.noisy",
        "rlblocks.nets.qdist",
        "rlblocks.nets.recurrent",
        "rlblocks.noise",
        "rlblocks.normalize",
        "rlblocks.offpolicy",
        "rlblocks.offpolicy_config",
        "rlblocks.onpolicy",
        "rlblocks.onpolicy_config",
        "rlblocks.optim",
        "rlblocks.pettingzoo_wrappers",
        "rlblocks.plugins.hookspecs",
        "rlblocks.plugins.manager",
        "rlblocks.plugins.registry",
        "rlblocks.plugins.spec",
        "rlblocks.policy",
        "rlblocks.protocols",
        "rlblocks.replay",
        "rlblocks.returns",
        "rlblocks.runs",
        "rlblocks.schedules",
        "rlblocks.seeds",
        "rlblocks.stats",
        "rlblocks.target",
        "rlblocks.temperature",
        "rlblocks.trainer",
        "rlblocks.tuning",
        "rlblocks.validators",
        "rlblocks.valuebased",
        "rlblocks.valuebased_config",
        "rlblocks.vector_env",
        "rlblocks.views",
    }
)


@frozen
class EntryInfo:
    """One registered component as metadata knows it (tier 0: nothing imported).

    ``value`` is the entry point's ``module:object`` (for in-process entries, ``"(in-process)"``);
    ``distribution`` and ``version`` are None for an in-process entry added without a distribution.
    """

    name: str
    kind: str
    distribution: str | None
    version: str | None
    value: str
    origin: Origin

    @property
    def group(self) -> str:
        """The entry-point group of this entry's kind (``rlblocks.algos``...)."""
        return GROUPS[self.kind]

    @property
    def qualified_name(self) -> str:
        """``name@distribution``: picks this entry even when another distribution has the name."""
        return f"{self.name}@{self.distribution}" if self.distribution else self.name

    def describe_source(self) -> str:
        """Where this entry comes from, for error messages."""
        if self.origin == "in-process":
            where = f" (distribution {self.distribution!r})" if self.distribution else ""
            return f"in-process registration{where}"
        return (
            f"distribution {self.distribution} {self.version} "
            f"(entry point {self.name} = {self.value} in group {self.group})"
        )


def _spec_content_problem(spec: PluginSpec) -> str | None:
    """What is wrong with a spec's own fields (its config class, the space names an algorithm
    accepts), found when the spec loads rather than as a user's config error later."""
    config = spec.config
    if config is not None:
        if not isinstance(config, type):
            return (
                f"config is {config!r}, an instance; give the config class itself "
                f"(config={type(config).__name__})"
            )
        if not attrs.has(config):
            return (
                f"config {config.__qualname__} is not an attrs class; decorate it with "
                "@attrs.define (configs are checked, structured and documented through attrs)"
            )
        required = [a.name for a in attrs.fields(config) if a.default is attrs.NOTHING]
        if required:
            return (
                f"config {config.__qualname__} has fields without a default ({', '.join(required)})"
                "; give every field a default, so that a run needs no setting it does not change"
            )
    for what in ("observation_spaces", "action_spaces"):
        value = getattr(spec, what, ())
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            return (
                f"{what} is {value!r}; give a tuple of gymnasium space class names, e.g. "
                "(\"Box\",)"
            )
    return None


def canonical_distribution_name(name: str) -> str:
    """Normalise a distribution name as pip does (PEP 503): ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: The first-party distributions each first-party distribution needs (from its pyproject's
#: dependencies; a test keeps the two in step), so that an install hint names them all: none of
#: them is on the package index, where pip would otherwise look for them.
FIRST_PARTY_NEEDS: dict[str, tuple[str, ...]] = {
    "rlblocks-algo-discrete-cql": ("rlblocks-algo-qrdqn",),
    "rlblocks-algo-gail": ("rlblocks-algo-ppo",),
    "rlblocks-algo-ippo": ("rlblocks-family-pettingzoo[mpe]", "rlblocks-algo-ppo"),
    "rlblocks-algo-maddpg": ("rlblocks-family-pettingzoo[mpe]",),
    "rlblocks-algo-masac": ("rlblocks-family-pettingzoo[mpe]", "rlblocks-algo-maddpg"),
    "rlblocks-algo-mappo": (
        "rlblocks-family-pettingzoo[mpe]", "rlblocks-algo-ppo", "rlblocks-algo-ippo",
    ),
    "rlblocks-algo-qmix": ("rlblocks-family-pettingzoo[mpe]",),
    "rlblocks-algo-rainbow": ("rlblocks-algo-c51", "rlblocks-buffer-prioritized"),
    "rlblocks-algo-trpo": ("rlblocks-algo-npg",),
    "rlblocks-algo-vdn": ("rlblocks-algo-qmix",),
    "rlblocks-buffer-cached": ("rlblocks-buffer-vector",),
    "rlblocks-buffer-her": ("rlblocks-buffer-vector",),
    "rlblocks-buffer-prioritized": ("rlblocks-buffer-vector",),
    "rlblocks-env-ray": ("rlblocks-env-subproc",),
    "rlblocks-env-shmem": ("rlblocks-env-subproc",),
}


def first_party_home(kind: str, name: str) -> tuple[str, str] | None:
    """``(distribution, folder)`` of a first-party plugin name: ``("rlblocks-algo-dqn",
    "plugins/algos/dqn")``, the folder relative to the rlblocks repository's root; None for a
    name this repository does not ship."""
    if name not in FIRST_PARTY.get(kind, ()):
        return None
    home_kind, home = _FIRST_PARTY_HOME.get((kind, name), (kind, name))
    home = home.replace("_", "-")
    return f"rlblocks-{home_kind}-{home}", f"{PLUGIN_FOLDERS[home_kind]}/{home}"


def _folder_of(distribution: str) -> str:
    """``plugins/algos/ppo`` for ``rlblocks-algo-ppo`` (an extra stays: ``...[mpe]``)."""
    _, kind, rest = distribution.split("-", 2)
    return f"{PLUGIN_FOLDERS[kind]}/{rest}"


def _with_needs(distribution: str, seen: dict[str, None]) -> None:
    base = distribution.partition("[")[0]
    for need in FIRST_PARTY_NEEDS.get(base, ()):
        _with_needs(need, seen)
    if not any(d.partition("[")[0] == base for d in seen):
        seen[distribution] = None


def install_hint(kind: str, name: str) -> str | None:
    """How to install a first-party plugin that is missing, else None: the command that works
    from a clone of the rlblocks repository (``pip install ./plugins/algos/dqn``, with the
    first-party plugins it needs before it), as the plugin distributions are not on the package
    index (a name there could be anyone's)."""
    home = first_party_home(kind, name)
    if home is None:
        return None
    needed: dict[str, None] = {}
    _with_needs(home[0], needed)
    paths = [
        f"'./{_folder_of(d)}'" if "[" in d else f"./{_folder_of(d)}" for d in needed
    ]
    return f"from the rlblocks repository: pip install {' '.join(paths)}"


class Registry:
    """The components of one kind: entry points in :data:`GROUPS` ``[kind]`` plus in-process ones.

    Get one with :func:`get_registry`; there is one per kind per process. Entry-point metadata is
    cached per ``sys.path``; call :func:`reset_caches` after installing a plugin in a running
    process.
    """

    def __init__(self, kind: str) -> None:
        if kind not in GROUPS:
            raise UnknownComponentError(
                f"no component kind {kind!r}; the kinds are {', '.join(GROUPS)}"
            )
        self.kind = kind
        self.group = GROUPS[kind]
        self._added: dict[str, tuple[PluginSpec, str | None]] = {}
        self._entry_cache: tuple[tuple[str, ...], list[EntryInfo]] | None = None
        self._spec_cache: dict[tuple[str | None, str | None, str], PluginSpec] = {}

    def __repr__(self) -> str:
        return f"<Registry {self.kind} ({self.group})>"

    # -- tier 0 ---------------------------------------------------------------------------------

    def _entry_points(self) -> list[EntryInfo]:
        """Every entry point of this group, including those shadowed by in-process additions."""
        key = tuple(sys.path)
        if self._entry_cache is not None and self._entry_cache[0] == key:
            return self._entry_cache[1]
        found = []
        for ep in importlib.metadata.entry_points(group=self.group):
            dist = ep.dist
            found.append(
                EntryInfo(
                    name=ep.name,
                    kind=self.kind,
                    distribution=dist.name if dist is not None else None,
                    version=dist.version if dist is not None else None,
                    value=ep.value,
                    origin="entry-point",
                )
            )
        found.sort(key=lambda e: (e.name, e.distribution or ""))
        self._entry_cache = (key, found)
        return found

    def entries(self) -> list[EntryInfo]:
        """Every component of this kind, sorted by name, from metadata only (tier 0).

        An in-process addition replaces the entry points of the same name in this list. Two
        distributions claiming one name both appear (resolving that name raises).
        """
        added = [
            EntryInfo(name, self.kind, dist, None, "(in-process)", "in-process")
            for name, (_spec, dist) in self._added.items()
        ]
        kept = [e for e in self._entry_points() if e.name not in self._added]
        return sorted([*added, *kept], key=lambda e: (e.name, e.distribution or ""))

    def names(self) -> list[str]:
        """The sorted, distinct names of this kind (tier 0)."""
        return sorted({e.name for e in self.entries()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.partition("@")[0] in self.names()

    def resolve(self, name: str) -> EntryInfo:
        """The one entry ``name`` (or ``name@distribution``) means, without importing anything.

        Raises :class:`UnknownComponentError` or :class:`DuplicateComponentError`.
        """
        base, _, dist = name.partition("@")
        if dist:
            return self._resolve_qualified(base, dist)
        if base in self._added:
            return next(e for e in self.entries() if e.name == base and e.origin == "in-process")
        matches = [e for e in self._entry_points() if e.name == base]
        if not matches:
            raise UnknownComponentError(self._unknown_message(base))
        if len(matches) > 1:
            raise DuplicateComponentError(self._duplicate_message(base, matches))
        return matches[0]

    def _resolve_qualified(self, base: str, dist: str) -> EntryInfo:
        want = canonical_distribution_name(dist)
        candidates = [e for e in self.entries() if e.name == base]
        # A qualified name can also reach an entry point that an in-process addition shadows.
        candidates += [e for e in self._entry_points() if e.name == base and e not in candidates]
        for entry in candidates:
            if entry.distribution and canonical_distribution_name(entry.distribution) == want:
                return entry
        if not candidates:
            raise UnknownComponentError(self._unknown_message(base))
        providers = ", ".join(sorted({e.distribution or "(in-process)" for e in candidates}))
        raise UnknownComponentError(
            f"no {self.kind} {base!r} from distribution {dist!r}; {base!r} is provided by: "
            f"{providers}"
        )

    def _unknown_message(self, name: str) -> str:
        installed = self.names()
        lines = [f"no {self.kind} named {name!r}."]
        hint = install_hint(self.kind, name)
        if hint:
            lines.append(f"{name!r} is a first-party plugin that is not installed; {hint}")
        lines.append(
            f"Installed {self.kind}s: {', '.join(installed)}" if installed
            else f"No {self.kind}s are installed."
        )
        known = sorted(set(installed) | FIRST_PARTY.get(self.kind, frozenset()))
        close = [c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.6) if c != name]
        if close:
            shown = [
                c if c in installed else f"{c} (not installed; {install_hint(self.kind, c)})"
                for c in close
            ]
            lines.append(f"Did you mean: {', '.join(shown)}?")
        lines.append("Run `rlblocks list` to see every installed component.")
        return "\n".join(lines)

    def _duplicate_message(self, name: str, matches: list[EntryInfo]) -> str:
        lines = [f"{self.kind} {name!r} is registered by {len(matches)} distributions:"]
        lines += [f"  - {m.describe_source()}" for m in matches]
        qualified = " or ".join(repr(m.qualified_name) for m in matches)
        lines.append(f"Uninstall all but one, or pick one with a qualified name: {qualified}.")
        return "\n".join(lines)

    # -- tier 1 ---------------------------------------------------------------------------------

    def spec(self, name: str) -> PluginSpec:
        """Import and check the spec ``name`` (or ``name@distribution``) registers (tier 1).

        Raises :class:`PluginLoadError` when the spec module fails to import or the object is not a
        spec of this kind named ``name``; the result is cached.
        """
        entry = self.resolve(name)
        if entry.origin == "in-process":
            return self._added[entry.name][0]
        key = (entry.distribution, entry.version, entry.value)
        cached = self._spec_cache.get(key)
        if cached is not None:
            return cached
        ep = importlib.metadata.EntryPoint(name=entry.name, value=entry.value, group=self.group)
        try:
            obj = ep.load()
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name in API_1_MODULES:
                raise PluginLoadError(
                    f"the {self.kind} plugin {entry.name!r} from {entry.describe_source()} was "
                    f"built for plugin API 1: it imports {exc.name}, a module of rlblocks before "
                    f"its 1.0 layout. This rlblocks speaks plugin API {PLUGIN_API_VERSION}, where "
                    "plugins import only the declared names of the faces (rlblocks.contracts, "
                    "rlblocks.plugins, rlblocks.algo, ...; see the plugin guide). Upgrade "
                    f"{entry.distribution} to a release for plugin API {PLUGIN_API_VERSION}, or "
                    "uninstall it."
                ) from exc
            raise PluginLoadError(
                f"the {self.kind} plugin {entry.name!r} from {entry.describe_source()} failed to "
                f"load its spec: {type(exc).__name__}: {exc}\n"
                f"Reinstall or upgrade {entry.distribution}, or uninstall it."
            ) from exc
        self._check_spec(obj, entry)
        self._spec_cache[key] = obj
        return obj

    def loadable_specs(self) -> dict[str, PluginSpec]:
        """``{name: spec}`` of every name whose spec loads (tier 1), for choosing among the
        installed plugins by what their specs declare. A name that fails (a broken plugin, or
        one registered twice) is left out here and reported where it is named."""
        specs = {}
        for name in self.names():
            try:
                specs[name] = self.spec(name)
            except Exception:  # any failure: spec() reports it where the name is used
                continue
        return specs

    def _check_spec(self, obj: object, entry: EntryInfo) -> None:
        def fail(problem: str) -> PluginLoadError:
            return PluginLoadError(
                f"the {self.kind} plugin {entry.name!r} from {entry.describe_source()} is invalid: "
                f"{problem}"
            )

        if not isinstance(obj, PluginSpec):
            raise fail(
                f"{entry.value} is a {type(obj).__name__}, not a PluginSpec; point the entry point "
                "at the spec object in the plugin's _spec module"
            )
        if obj.kind != self.kind:
            raise fail(
                f"it is a {type(obj).__name__} (kind {obj.kind!r}) registered in group "
                f"{self.group}; register it in {GROUPS.get(obj.kind, 'the group of its kind')}"
            )
        if obj.name != entry.name:
            raise fail(
                f"the spec is named {obj.name!r} but its entry point is named {entry.name!r}; "
                "make them equal"
            )
        problem = _spec_content_problem(obj)
        if problem:
            raise fail(problem)
        if obj.api_version != PLUGIN_API_VERSION:
            newer = "rlblocks" if obj.api_version > PLUGIN_API_VERSION else entry.distribution
            raise fail(
                f"it was built for plugin API {obj.api_version}, this rlblocks speaks "
                f"{PLUGIN_API_VERSION}; upgrade {newer} (or uninstall {entry.distribution})"
            )

    # -- tier 2 ---------------------------------------------------------------------------------

    def load(self, name: str) -> object:
        """Import the implementation of ``name`` (tier 2): the class or factory its spec names.

        Raises :class:`PluginLoadError`, chained to the original error, when that import fails.
        """
        spec = self.spec(name)
        try:
            return spec.load()
        except Exception as exc:
            entry = self.resolve(name)
            raise PluginLoadError(
                f"the {self.kind} plugin {spec.name!r} from {entry.describe_source()} failed to "
                f"import its implementation {spec.impl}: {type(exc).__name__}: {exc}"
            ) from exc

    # -- in-process registration ----------------------------------------------------------------

    def add(self, spec: PluginSpec, distribution: str | None = None) -> PluginSpec:
        """Register ``spec`` in this process under ``spec.name`` and return it.

        An in-process spec shadows any installed entry point of the same name (the entry point
        stays reachable as ``name@distribution``); adding a name again replaces the earlier
        in-process spec, so re-running a notebook cell is harmless. Use :meth:`scoped` in tests.
        """
        if not isinstance(spec, PluginSpec):
            raise TypeError(f"expected a PluginSpec, got {type(spec).__name__}")
        if spec.kind != self.kind:
            raise TypeError(
                f"a {type(spec).__name__} (kind {spec.kind!r}) cannot be added to the "
                f"{self.kind} registry; use get_registry({spec.kind!r})"
            )
        if "@" in spec.name or not spec.name:
            raise ValueError(f"invalid component name {spec.name!r}: it must be non-empty, no '@'")
        problem = _spec_content_problem(spec)
        if problem:
            raise PluginLoadError(f"the {self.kind} spec {spec.name!r} is invalid: {problem}")
        self._added[spec.name] = (spec, distribution)
        return spec

    def remove(self, name: str) -> None:
        """Remove an in-process registration; installed entry points cannot be removed."""
        if name not in self._added:
            raise UnknownComponentError(
                f"no in-process {self.kind} named {name!r}; in-process ones: "
                f"{', '.join(sorted(self._added)) or 'none'}"
            )
        del self._added[name]

    @contextlib.contextmanager
    def scoped(self) -> Iterator[Registry]:
        """Restore the in-process registrations on exit, whatever was added or removed inside."""
        saved = dict(self._added)
        try:
            yield self
        finally:
            self._added = saved

    def clear_cache(self) -> None:
        """Forget cached metadata and specs (not in-process registrations)."""
        self._entry_cache = None
        self._spec_cache.clear()


_REGISTRIES: dict[str, Registry] = {}


def get_registry(kind: str) -> Registry:
    """The process-wide registry of ``kind``: ``"algo"``, ``"buffer"``, ``"env"``, ``"logger"``."""
    registry = _REGISTRIES.get(kind)
    if registry is None:
        registry = _REGISTRIES[kind] = Registry(kind)
    return registry


def reset_caches() -> None:
    """Forget cached metadata and specs of every registry, e.g. after ``pip install`` in-process."""
    for registry in _REGISTRIES.values():
        registry.clear_cache()
