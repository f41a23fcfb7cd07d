"""Env families: envs of an API other than gymnasium's single-agent one, added by plugins.

A plugin registers an :class:`~rlblocks.plugins.EnvFamilySpec` in the ``rlblocks.env_families``
entry-point group; its ``env_ids`` patterns say which ``env.id`` values it claims (read from the
spec alone, so checking an id imports no plugin code). A run on such an id has the family build
its vector envs, policies, buffers and collectors (:meth:`EnvFamily.build`); the trainer,
checkpoints, hooks and run directory stay core's. PettingZoo's multi-agent envs come this way
(``rlblocks-family-pettingzoo``), and another multi-agent API can come the same way without a
change to core.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from attrs import define, frozen

from rlblocks.plugins import AlgoSpec, EnvFamilySpec, get_registry

__all__ = ["EnvFamily", "FamilyBuild", "FamilyParts", "env_family"]


@frozen
class FamilyBuild:
    """What a family is given to build a run's parts."""

    config: Any
    """The run's resolved config (an ``ExperimentConfig``)."""
    algo_spec: AlgoSpec
    seed: int
    device: str
    make_policy: Callable[..., Any]
    """``make_policy(observation_space, action_space, state_space=None)``: the run's algorithm
    with its config, on its device."""
    make_buffer: Callable[..., Any]
    """``make_buffer(lanes, name=None)``: a buffer with the run's buffer settings and ``lanes``
    chains of steps; ``name`` (a policy's) keeps the memory-mapped files of several apart."""


@define
class FamilyParts:
    """What a family builds for a run. ``policy`` and ``buffer`` may be mappings of several
    (one per policy, by name): core seeds and checks every buffer of such a mapping."""

    train_envs: Any
    test_envs: Any
    policy: Any
    buffer: Any
    train_collector: Any
    test_collector: Any


@runtime_checkable
class EnvFamily(Protocol):
    """The object an env family's spec names (``impl``, built without arguments)."""

    def check_env_id(self, env_id: str, trusted: bool = True) -> None:
        """Raise a ConfigError when ``env_id`` cannot be made; import the module it names only
        when ``trusted`` (or when it is already imported or a known package's)."""
        ...

    def build(self, run: FamilyBuild) -> FamilyParts:
        """The run's vector envs, policy or policies (seeded with ``run.seed``), buffer or
        buffers (from ``run.make_buffer``) and train and test collectors."""
        ...

    def probe_envs(self, env_fns: Sequence[Callable[[], Any]]) -> Any:
        """A vector env of this family presenting single-agent gymnasium envs as one-agent
        envs (the conformance kit checks algorithms that need a global state on it)."""
        ...

    def collector(self, policy: Any, envs: Any, buffer: Any, seed: int = 0) -> Any:
        """A training collector of this family over ``envs`` (for the conformance kit)."""
        ...

    # A family whose spec is ``loadable`` also has ``agent(run: FamilyBuild) -> Agent``: a
    # run's agent built from its config (``run.make_policy`` builds each policy; there is no
    # buffer), without weights: ``rlblocks.load`` loads the checkpoint into ``agent.policy``.


_INSTANCES: dict[str, EnvFamily] = {}


def env_family(env_id: Any) -> tuple[EnvFamilySpec, EnvFamily] | None:
    """The installed family that claims ``env_id`` (the first whose spec's ``env_ids`` matches)
    and its object, or None for gymnasium's own envs."""
    if not isinstance(env_id, str):
        return None
    registry = get_registry("family")
    for name, spec in registry.loadable_specs().items():
        if not isinstance(spec, EnvFamilySpec):
            continue
        if any(fnmatch.fnmatchcase(env_id, pattern) for pattern in spec.env_ids):
            family = _INSTANCES.get(spec.impl)
            if family is None:
                family = _INSTANCES[spec.impl] = registry.load(name)()
            return spec, family
    return None
