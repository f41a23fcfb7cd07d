"""Plugin specs: the small, import-light description every component registers.

An entry point in one of the ``rlblocks.*`` groups points at a spec object defined in the
plugin's light ``_spec.py`` module, which imports nothing heavier than attrs. The spec names the
heavy implementation by a string import path, so listing and validating plugins never imports
torch or the plugin's code (the registry's tiers 0 and 1); only building a component does (tier 2).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import attrs
from attrs import field, frozen

#: Bumped when the contract between core and plugins changes incompatibly: 2 is the 1.0 layout,
#: where plugins import only the names the faces declare (``__all__``).
PLUGIN_API_VERSION = 2

#: The networks a user may bring to an algorithm (``AlgoSpec.networks`` lists those it takes):
#: ``encoder`` (observations -> features), ``actor`` and ``critic`` (heads over the features),
#: ``model`` (a value-based algorithm's whole Q-network).
NETWORK_PARTS = ("encoder", "actor", "critic", "model")


def _check_import_path(_inst: object, attribute: Any, value: str) -> None:
    module, sep, attr = value.partition(":")
    if not (module and sep and attr):
        raise ValueError(
            f"{attribute.name}={value!r} is not an import path; write it as 'package.module:object'"
        )


def import_object(path: str) -> Any:
    """Import ``'package.module:attr.sub'`` and return the object it names."""
    module_name, _, attr_path = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


@frozen(kw_only=True)
class PluginSpec:
    """What every component spec carries.

    ``impl`` is the import path of the implementation (a class or factory), imported only when a
    component is built. ``config`` is the component's attrs config class (or None when it takes no
    options); it must live in an import-light module too, because configs are validated before
    anything is built.
    """

    kind: ClassVar[str] = "component"

    name: str
    summary: str
    impl: str = field(validator=_check_import_path)
    config: type | None = None
    api_version: int = PLUGIN_API_VERSION
    path_fields: tuple[str, ...] = field(default=(), converter=tuple)
    """Fields of ``config`` that name a file or folder the component writes (W&B's ``dir``).
    ``resume`` takes such a setting from a run directory's ``config.json`` only when it lies
    inside that run directory, when the user gives it again or trusts the run."""
    endpoint_fields: tuple[str, ...] = field(default=(), converter=tuple)
    """Fields of ``config`` that say where the component connects or what it asks of that
    place (MLflow's ``tracking_uri``, W&B's ``entity``, a Ray cluster's ``address``). ``resume``
    takes such a setting from a run directory's ``config.json`` only when the user gives it
    again or trusts the run; left unset, the component uses the user's own defaults."""

    @path_fields.validator
    @endpoint_fields.validator
    def _check_declared_fields(self, attribute: Any, value: tuple[str, ...]) -> None:
        if not value:
            return
        if self.config is None or not attrs.has(self.config):
            raise ValueError(f"{attribute.name}={value!r} needs an attrs config class to name")
        known = {a.name for a in attrs.fields(self.config)}
        unknown = [name for name in value if name not in known]
        if unknown:
            raise ValueError(f"{attribute.name}: {unknown} are no fields of {self.config.__name__}")

    def load(self) -> Any:
        """Import and return the implementation object (tier 2)."""
        return import_object(self.impl)

    def describe(self) -> dict[str, Any]:
        """Capabilities as plain data, for ``rlblocks list --details``."""
        out: dict[str, Any] = {}
        for a in self.__attrs_attrs__:  # type: ignore[attr-defined]
            if a.name in {"name", "summary", "impl"}:
                continue
            value = getattr(self, a.name)
            if a.name in {"path_fields", "endpoint_fields"} and not value:
                continue  # most components reach nothing outside the run: no line for it
            if a.name == "env_defaults" and isinstance(value, dict):
                value = sorted(value)  # the patterns; `rlblocks describe` shows the values
            elif a.name == "defaults" and isinstance(value, dict):
                value = {section: sorted(fields) for section, fields in value.items()}
            if isinstance(value, type):
                value = f"{value.__module__}:{value.__qualname__}"
            elif isinstance(value, frozenset | tuple):
                value = sorted(value) if isinstance(value, frozenset) else list(value)
            out[a.name] = value
        return out


@frozen(kw_only=True)
class AlgoSpec(PluginSpec):
    """An algorithm. ``impl`` names a Policy class built as
    ``Cls(observation_space, action_space, config=config, device=device)``.

    ``observation_spaces`` / ``action_spaces`` list gymnasium space class names it accepts
    (``"Box"``, ``"Discrete"``, ``"MultiDiscrete"``, ``"Dict"``...). ``training`` is one of
    ``"on-policy"``, ``"off-policy"``, ``"offline"``; it picks the trainer loop.
    ``uses_dataset`` marks an online algorithm that also learns from a dataset (GAIL's expert
    demonstrations).
    """

    kind: ClassVar[str] = "algo"

    observation_spaces: tuple[str, ...] = ("Box",)
    action_spaces: tuple[str, ...] = ("Discrete",)
    training: str = field(default="off-policy")
    recurrent: bool = False
    networks: tuple[str, ...] = field(default=())
    """The parts of its networks a user may replace (of :data:`NETWORK_PARTS`), as modules or
    factories from Python (``make_policy``, ``train(networks=...)``) and, for ``encoder``, as an
    import path in a config (``algo.encoder``). Empty: the algorithm builds all its networks."""
    needs_global_state: bool = False
    """The policy learns from a multi-agent env's global state (a centralised critic, built with
    ``state_space``), so it trains only on envs that have one; a single-agent env is refused
    before anything is built and the algorithm is left out of the names suggested for it."""
    uses_dataset: bool = field(default=False)
    """An online algorithm (``training`` on- or off-policy) that also learns from a dataset:
    a run refuses to start without ``buffer.dataset`` (``--dataset``), loads it and hands it to
    the policy's ``set_dataset`` before training (GAIL's expert demonstrations). Offline
    algorithms learn from a dataset by definition and leave it False."""
    action_masks: bool = False
    """The algorithm honours action masks (a Dict observation's ``"action_mask"``, PettingZoo's
    convention): it never acts illegally (greedy, sampled, epsilon-random and warm-up actions),
    its targets take maxima and expectations over legal next actions and its losses use masked
    distributions. An env with masks and an algorithm without is refused before anything runs."""
    multi_agent: bool = False
    """The algorithm is made for multi-agent envs (an env family's, e.g. PettingZoo's) and
    trains a single-agent env as a plain single-agent algorithm would (IPPO is PPO there): such
    a run is made, with a warning naming what to train instead."""
    joint_agents: bool = False
    """The algorithm learns from *joint* transitions of a multi-agent env (QMIX, VDN,
    centralised critics over all agents' actions): an env family that has a joint view (the
    PettingZoo family's ``JointAgentEnv``) gives it one single-agent env per multi-agent env,
    whose observation holds every agent's (a Dict of ``obs``, ``state`` and, with masks,
    ``action_mask``), whose action is every agent's and whose reward is the team's; the
    standard collector, buffers and backends then run it. A single-agent env is refused."""
    defaults: dict[str, dict[str, Any]] = field(factory=dict)
    """Per-section defaults this algorithm brings (``{"trainer": {"batch_size": 64}}``); they sit
    between the sections' own defaults and the user's config file and flags."""
    env_defaults: dict[str, dict[str, dict[str, Any]]] = field(factory=dict)
    """Per-env-family defaults: an ``fnmatch`` pattern of env ids (``"*Cheetah*"``,
    ``"Pendulum-*"``) mapped to section defaults, applied over ``defaults`` when the run's env id
    matches (patterns in order, later ones win) and under the user's config file and flags."""

    @networks.validator
    def _check_networks(self, _attr: Any, value: tuple[str, ...]) -> None:
        unknown = [p for p in value if p not in NETWORK_PARTS]
        if unknown:
            raise ValueError(f"networks={value!r}: unknown {unknown}; use some of {NETWORK_PARTS}")

    @training.validator
    def _check_training(self, _attr: Any, value: str) -> None:
        if value not in {"on-policy", "off-policy", "offline"}:
            raise ValueError(f"training={value!r}; use 'on-policy', 'off-policy' or 'offline'")

    @uses_dataset.validator
    def _check_uses_dataset(self, _attr: Any, value: bool) -> None:
        if value and self.training == "offline":
            raise ValueError(
                "uses_dataset=True is for online algorithms that also learn from a dataset; an "
                "offline one learns from it by definition: leave uses_dataset out"
            )

    def describe(self) -> dict[str, Any]:
        """:meth:`PluginSpec.describe`, with ``training`` saying ``"on-policy with a dataset"``
        (or off-policy) for an online algorithm that also learns from one."""
        out = super().describe()
        if out.pop("uses_dataset", False):
            out["training"] = f"{self.training} with a dataset"
        return out


BUFFER_PARTS = ("layout", "sampler", "relabeller", "writer")


@frozen(kw_only=True)
class BufferSpec(PluginSpec):
    """One part of a replay buffer (see :mod:`rlblocks.replay`). ``part`` says which:

    * ``"layout"``: ``impl`` is built as ``Cls(size, num_envs, **config_fields)``;
    * ``"sampler"``, ``"relabeller"``, ``"writer"``: built as ``Cls(**config_fields)``.

    ``config`` holds only the part's own options (``stack_num``, ``storage``... belong to the
    buffer). A part named as the buffer itself (``make_buffer("prioritized", ...)``) goes on
    ``default_layout`` (core's ``"replay"`` when None)."""

    kind: ClassVar[str] = "buffer"

    part: str = field(default="layout")
    default_layout: str | None = None
    import_fields: tuple[str, ...] = ()
    """Config fields that name code to import (``"package.module:function"``); a buffer file
    that sets them is loaded only with ``trust_imports=True`` (loading never runs code a file
    names without consent)."""

    @part.validator
    def _check_part(self, _attr: Any, value: str) -> None:
        if value not in BUFFER_PARTS:
            raise ValueError(f"part={value!r}; use one of {list(BUFFER_PARTS)}")


@frozen(kw_only=True)
class EnvBackendSpec(PluginSpec):
    """A vector-env backend. ``impl`` names a class built as ``Cls(env_fns, **config_fields)``
    where ``env_fns`` is a list of zero-argument callables returning gymnasium envs."""

    kind: ClassVar[str] = "env"

    supports_async: bool = False
    multiprocess: bool = False
    provides: str | None = field(default=None)
    """Import path of ``fn(env_fn) -> bool``: True when this backend runs that env natively
    (EnvPool's C++ envs); ``backend="auto"`` then picks it before weighing the others."""

    @provides.validator
    def _check_provides(self, attribute: Any, value: str | None) -> None:
        if value is not None:
            _check_import_path(self, attribute, value)


@frozen(kw_only=True)
class EnvFamilySpec(PluginSpec):
    """An env family: envs of an API other than gymnasium's single-agent one (PettingZoo's
    multi-agent envs, ...). ``impl`` names a class built without arguments whose instance has
    the :class:`rlblocks.run.EnvFamily` methods; a run whose ``env.id`` matches one of
    ``env_ids`` (``fnmatch`` patterns, read without importing the plugin) has the family build
    its envs, policies, buffers and collectors."""

    kind: ClassVar[str] = "family"

    env_ids: tuple[str, ...] = field(default=())
    supports_async: bool = False
    """Its envs can be collected asynchronously (``trainer.async_collect``)."""
    supports_offline: bool = False
    """Offline algorithms can train on its envs from a dataset."""
    loadable: bool = False
    """``rlblocks.load`` brings its runs back as an :class:`~rlblocks.run.Agent`."""
    provides_global_state: bool = False
    """Its vector envs have a ``state_space`` (centralised critics train on them); the
    conformance kit checks such algorithms on its ``probe_envs``."""

    @env_ids.validator
    def _check_env_ids(self, _attr: Any, value: tuple[str, ...]) -> None:
        if not value or not all(isinstance(p, str) and p for p in value):
            raise ValueError(
                f"env_ids={value!r}; give the env id patterns this family claims, e.g. "
                "('*:parallel_env',)"
            )


@frozen(kw_only=True)
class LoggerSpec(PluginSpec):
    """A logger. ``impl`` names a class built as ``Cls(run_dir, config)``; the instance is then
    registered as a pluggy hook implementation for the run."""

    kind: ClassVar[str] = "logger"
