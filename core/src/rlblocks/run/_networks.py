"""Your own networks in runs: which parts an algorithm takes, the import paths a config names
(``algo.encoder``) under the trust rule of run directories, the record a run keeps of networks
that came from Python (``run.networks``), and the algorithm of a policy object handed to
:func:`rlblocks.train`.

A run directory is data: an import path read from it is imported only when the user trusts the
run (``trust_imports=True``, ``--trust-imports``) or has imported the module already, exactly as
env ids of the form ``module:EnvId``; networks given as Python objects are never saved as code,
only named, and are passed again to load or resume the run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from rlblocks.contracts import ConfigError
from rlblocks.plugins import (
    NETWORK_PARTS,
    AlgoSpec,
    get_registry,
    import_object,
    untrusted_module,
)
from rlblocks.run._advice import option

__all__ = [
    "algo_of_policy",
    "check_network_imports",
    "check_networks",
    "check_networks_again",
    "check_policy_class_again",
    "network_factory",
    "networks_taken",
]


def networks_taken(spec: AlgoSpec) -> str:
    """What ``spec``'s algorithm takes of a user's networks, as the end of an error message."""
    if not spec.networks:
        return "it builds all of its networks itself (its config sets their sizes)"
    return f"it takes {_and(spec.networks)}"


def _and(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def check_networks(spec: AlgoSpec, networks: Mapping[str, Any]) -> None:
    """Refuse a network part the algorithm of ``spec`` does not take (one line naming the
    algorithm, the part and what it takes)."""
    for part in networks:
        if part not in NETWORK_PARTS:
            raise ConfigError(
                f"networks: {part!r} is not a network part; the parts are "
                f"{_and(NETWORK_PARTS)} (algo {spec.name!r}: {networks_taken(spec)})"
            )
        if part not in spec.networks:
            raise ConfigError(
                f"algo {spec.name!r} takes no {part} of yours; {networks_taken(spec)}"
            )


def network_factory(path: str, kwargs: Mapping[str, Any], trusted: bool = True) -> Any:
    """The factory an ``algo.encoder`` import path names, with ``kwargs`` bound. Importing runs
    the module's code: ``trusted=False`` (a path read from someone's run directory) refuses a
    module that is not imported yet, as env ids of the form ``module:EnvId`` are refused."""
    module = untrusted_module(path)
    if module is not None and not trusted:
        raise ConfigError(
            f"algo.encoder {path!r} names code in the module {module!r}, and importing it runs "
            f"that code; import it yourself first, or pass "
            f"{option('trust_imports=True', '--trust-imports')} if you trust this run"
        )
    try:
        factory = import_object(path)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"algo.encoder {path!r}: cannot import it ({exc}); is its package installed or on "
            "PYTHONPATH?"
        ) from exc
    if not callable(factory):
        raise ConfigError(
            f"algo.encoder {path!r} is a {type(factory).__name__}, not a factory; name a "
            "function or class called as factory(observation_space, action_space, **kwargs)"
        )
    return functools.partial(factory, **kwargs) if kwargs else factory


def check_network_imports(config: Any, trusted: bool) -> None:
    """Refuse, before a run directory's config builds anything, an ``algo.encoder`` whose
    module would be imported without trust (see :func:`network_factory`)."""
    path = getattr(config.algo, "encoder", None)
    if path is not None and not trusted:
        network_factory(path, {}, trusted=False)


def check_networks_again(config: Any, networks: Mapping[str, Any], what: str, how: str) -> None:
    """A run trained with networks from Python (``run.networks``) needs each of them passed
    again to be rebuilt, and takes no other: said for ``what`` (loading, resuming), with
    ``how`` to pass them."""
    recorded = dict(config.run.networks or {})
    for part, source in recorded.items():
        if part not in networks:
            raise ConfigError(
                f"this run was trained with your own {part} ({source}); {what} needs it again: "
                f"{how}"
            )
    for part in networks:
        if part not in recorded:
            raise ConfigError(
                f"this run was trained with the built-in {part}, and its checkpoints hold that "
                f"network's weights; leave {part!r} out of networks"
            )


def check_policy_class_again(config: Any, policy_class: type | None, what: str, how: str) -> None:
    """A run trained with a policy object of a subclass (``run.policy_class``) needs the class
    passed again to be rebuilt as such, and a run without one takes none: said for ``what``
    (loading, resuming), with ``how`` to pass it."""
    recorded = config.run.policy_class
    if recorded is not None and policy_class is None:
        spec = get_registry("algo").spec(config.algo_name)
        base = spec.impl.rpartition(":")[2]
        raise ConfigError(
            f"this run trained a policy of your class {recorded} (a subclass of {base}); "
            f"{what} needs the class again: {how} (policy_class={base} rebuilds the "
            "algorithm's own class instead)"
        )
    if recorded is None and policy_class is not None:
        raise ConfigError(
            f"this run trained the algorithm's own policy class ({config.algo_name}); leave "
            "policy_class out"
        )


def algo_of_policy(policy: Any) -> str:
    """The registry name of the algorithm that ``policy`` (a policy object) belongs to: the
    first class along its MRO that an installed spec's ``impl`` names. When several specs name
    one class (``ppo`` and ``ippo`` both build a ``PPOPolicy``), the one whose distribution is
    named after it wins."""
    specs = get_registry("algo").loadable_specs()
    for cls in type(policy).__mro__:
        path = f"{cls.__module__}:{cls.__qualname__}"
        names = [name for name, spec in specs.items() if spec.impl == path]
        if len(names) > 1:
            package = cls.__module__.partition(".")[0]
            names = [n for n in names if package == f"rlblocks_algo_{n.replace('-', '_')}"] or names
        if len(names) == 1:
            return names[0]
        if names:
            raise ConfigError(
                f"a {type(policy).__qualname__} is the policy of several algorithms "
                f"({', '.join(names)}); pass the algorithm's name and your networks instead: "
                f"rlblocks.train({names[0]!r}, networks={{...}})"
            )
    raise ConfigError(
        f"rlblocks.train cannot tell which algorithm a {type(policy).__qualname__} is (no "
        "installed algorithm's spec builds it); pass the algorithm's registry name and your "
        "networks instead (rlblocks.train('ppo', networks={'actor': ...})), or register a spec "
        "for its class (rlblocks.plugins.get_registry('algo').add(AlgoSpec(...)))"
    )
