"""Components by name: the registry lookups and factories that build vector envs, buffers and
policies from registry names and options, and the checks a run makes on a resolved config before
it builds anything (env id, device, loggers, the algorithm against the env's spaces).

``rlblocks.make_vector_env``, ``make_buffer`` and ``make_policy`` are these functions; a run
(:mod:`rlblocks.run`) and a loaded agent (:mod:`rlblocks.run`) build through them, so a
name means the same component everywhere.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import operator
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import torch

from rlblocks.contracts import (
    BufferAbilities,
    BufferFileError,
    ConfigError,
    EnvWorkerError,
    PluginLoadError,
    RlblocksError,
    RunHooksEnv,
    check_action_mask_space,
    has_action_mask,
    writable_dir_problem,
)
from rlblocks.plugins import AlgoSpec, PluginSpec, get_registry, import_entry, install_hint
from rlblocks.run import _config as cfg
from rlblocks.run._advice import current_command, option, trust_advice
from rlblocks.run._family import env_family
from rlblocks.run._networks import check_networks, network_factory, networks_taken

EnvSource = str | gym.Env | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]]


def spec_lookup(kind: str, name: str) -> PluginSpec:
    """The registry lookup configs use to find plugin option classes."""
    return get_registry(kind).spec(name)


def options_dict(options: Any) -> dict[str, Any]:
    """A plugin's options (an attrs config instance, a mapping or None) as a plain dict."""
    if options is None:
        return {}
    if attrs.has(type(options)):
        return attrs.asdict(options, recurse=False)
    return dict(options)


def _config_options(kind: str, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate keyword options against the plugin's config class (clear errors on typos)."""
    spec = spec_lookup(kind, name)
    if not options:
        return options_dict(spec.config()) if spec.config is not None else {}
    if spec.config is None:
        raise ConfigError(f"{kind} {name!r} takes no options, got {sorted(options)}")
    built = cfg.structure_options(spec.config, options, label=f"{kind} ({name})")
    return options_dict(built)


# -- building blocks ---------------------------------------------------------------------------
def _env_count(num_envs: Any) -> int:
    """``num_envs`` as an int, refused by name when it is not a whole number >= 1 (a 0 would
    otherwise surface as a backend's "no env factory" error)."""
    try:
        n = operator.index(num_envs)
    except TypeError:
        n = 0
    if isinstance(num_envs, bool) or n < 1:
        raise ConfigError(
            f"num_envs must be a whole number of at least 1, got {num_envs!r}; "
            "it is how many copies of the env run side by side"
        )
    return n


def make_env_fns(
    env: EnvSource,
    num_envs: int,
    make_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Any] = (),
) -> list[Callable[[], gym.Env]]:
    """Env factories from a gymnasium id (``num_envs`` copies), one factory (``num_envs``
    copies), a list of factories, or one env already made (``num_envs=1``: it cannot be
    copied); ``wrappers`` (import paths or ``{"path", "kwargs"}`` tables, innermost first) wrap
    every env."""
    if isinstance(env, gym.vector.VectorEnv):
        raise ConfigError(
            f"env is a gymnasium vector env ({type(env).__name__}); rlblocks' vector envs reset "
            "finished envs themselves instead of autoresetting, so pass what it was made from: "
            "an env id, an env factory or a list of factories"
        )
    if isinstance(env, gym.Env):
        if _env_count(num_envs) != 1:
            raise ConfigError(
                f"one env instance cannot make num_envs={num_envs} envs; pass a factory "
                "(e.g. lambda: gym.make(...)) or an env id to get copies"
            )
        made = env
        env = [lambda: made]
    if isinstance(env, str) or callable(env):
        num_envs = _env_count(num_envs)
    if isinstance(env, str):
        env_spec(env)
        kwargs = dict(make_kwargs or {})
        fns: list[Callable[[], gym.Env]] = [
            lambda: make_gym_env(env, **kwargs) for _ in range(num_envs)
        ]
    elif callable(env):
        what = _factory_label(env)
        fns = [_made_env(env, i, what) for i in range(num_envs)]
    else:
        fns = list(env)
        if not fns or not all(callable(f) for f in fns):
            raise ConfigError(
                "env must be a gymnasium id, an env factory or a non-empty list of factories"
            )
        if num_envs not in (1, len(fns)):  # 1: the default, a list brings its own count
            raise ConfigError(
                f"num_envs={num_envs} with a list of {len(fns)} env factories: the list makes "
                f"one env per factory; pass num_envs={len(fns)} (or leave it out), or one "
                "factory to get num_envs copies"
            )
        fns = [_made_env(f, i, _factory_label(f)) for i, f in enumerate(fns)]
    layers = [_wrapper(w) for w in wrappers]
    if not layers:
        return fns

    def wrapped(fn: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            e = fn()
            for cls, kwargs in layers:
                try:
                    e = cls(e, **kwargs)
                except Exception as exc:
                    name = f"{cls.__module__}:{cls.__qualname__}"
                    raise ConfigError(
                        f"env.wrappers: {name} with kwargs {kwargs} failed: {exc}"
                    ) from exc
            return e

        return make

    return [wrapped(f) for f in fns]


def _factory_label(fn: Any) -> str:
    """How errors name an env factory: its qualified name (``<lambda>`` for a lambda)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}:{name}" if module and module != "__main__" else str(name)


def _wrapper(item: Any) -> tuple[type, dict[str, Any]]:
    """The wrapper class and kwargs of one ``env.wrappers`` entry."""
    cls, kwargs = import_entry(item, "env.wrappers")
    path = item["path"] if isinstance(item, Mapping) else item
    if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper | gym.ObservationWrapper)):
        raise ConfigError(f"env.wrappers: {path!r} is not a gymnasium wrapper class")
    return cls, kwargs


def stacked_space(space: gym.Space, frames: int) -> gym.Space:
    """What a policy sees when the buffer stacks ``frames`` observations (``stack_num``):
    ``space`` itself for 1, else a Box of shape ``(frames, *space.shape)``; a Dict of Boxes
    stacks each key so (a Dict of the stacked Boxes)."""
    if frames <= 1:
        return space
    if isinstance(space, gym.spaces.Dict):
        try:
            return gym.spaces.Dict({k: stacked_space(sub, frames) for k, sub in space.items()})
        except ConfigError:
            pass  # named below for the whole space
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(
            f"$.buffer.stack_num={frames} stacks observations, which needs a Box observation "
            f"space or a Dict of Boxes; this env's is {space}"
        )
    low = np.broadcast_to(space.low, (frames, *space.shape))
    high = np.broadcast_to(space.high, (frames, *space.shape))
    return gym.spaces.Box(low, high, dtype=space.dtype)  # type: ignore[arg-type]


#: gymnasium id namespaces whose envs a package registers when imported (gymnasium 1.x loads
#: no env plugins by itself): namespace -> (module, how to install it)
ENV_NAMESPACES: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "pip install 'rlblocks[atari]' (the Arcade Learning Environment, ale-py)"),
    "rlblocks": ("rlblocks.run._envs", "it ships with rlblocks itself; reinstall rlblocks"),
    "games": (
        "rlblocks_family_pettingzoo.games",
        "from the rlblocks repository: pip install ./plugins/families/pettingzoo "
        "'pettingzoo[classic]' (two-player games from PettingZoo's classic set)",
    ),
}


def env_run_hooks(env_id: str, config: Mapping[str, Any], trusted: bool = True) -> list[object]:
    """Hook objects a run on the gymnasium id ``env_id`` needs on the trainer's side: those of
    an env class that declares :class:`~rlblocks.contracts.RunHooksEnv` (e.g. the games'
    self-play, which copies the learner into the envs' opponent pools); none for env-family ids
    and other envs."""
    if env_family(env_id) is not None:
        return []
    try:
        entry = env_spec(env_id, trusted=trusted).entry_point
    except ConfigError:
        return []  # making the env says what is wrong with it
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return []  # making the env says what is wrong with it
    return list(entry.rlblocks_run_hooks(config)) if isinstance(entry, RunHooksEnv) else []


def import_env_namespace(env_id: str) -> None:
    """Import the package that registers ``env_id``'s namespace (``ALE/Pong-v5`` -> ale_py), so
    that plain ids work in every process; a clear error when it is not installed."""
    namespace = env_id.rpartition(":")[2].partition("/")[0] if "/" in env_id else ""
    known = ENV_NAMESPACES.get(namespace)
    if known is None or known[0] in sys.modules:
        return
    module, install = known
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"env {env_id!r} needs the {module} package: {install}") from exc


def import_env_module(module: str) -> None:
    """Import the module of a ``module:EnvId`` env id. As with ``python -m``, a module in the
    current directory is found too: when it is not importable otherwise and the directory
    holds it (``mymod.py`` or a ``mymod/`` package), the directory joins the end of the import
    path (last, so it hides nothing installed; env workers started later inherit it)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        root = module.split(".")[0]
        here = os.getcwd()
        if exc.name != root or here in sys.path or "" in sys.path:
            raise
        if not (os.path.isfile(os.path.join(here, f"{root}.py"))
                or os.path.isdir(os.path.join(here, root))):  # fmt: skip
            raise
        sys.path.append(here)
        importlib.import_module(module)


def make_gym_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` after registering the id's namespace; keyword
    arguments the env does not take are named as a config problem (``env.make_kwargs``), and an
    env whose constructor raises is an EnvWorkerError naming it (the cause chained)."""
    import_env_namespace(env_id)
    module, sep, _ = env_id.rpartition(":")
    if sep and module not in sys.modules:  # a worker process: its own import, from here too
        with contextlib.suppress(ImportError):  # gymnasium's own error says it below
            import_env_module(module)
    try:
        return gym.make(env_id, **kwargs)
    except RlblocksError:
        raise
    except TypeError as exc:
        if kwargs and "argument" in str(exc):
            raise ConfigError(
                f"env {env_id!r} cannot be made with the keyword arguments {sorted(kwargs)}: "
                f"{exc}; fix env.make_kwargs (--set 'env.make_kwargs={{...}}')"
            ) from None
        raise _unmade(env_id, exc) from exc
    except Exception as exc:
        raise _unmade(env_id, exc) from exc


def _unmade(env_id: str, exc: Exception) -> EnvWorkerError:
    """The one-line error of an env whose constructor (or gymnasium's checks of it) raised."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said = text if isinstance(exc, gym.error.Error | ImportError) else (
        f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    )
    return EnvWorkerError(
        f"env {env_id!r} could not be made: {said}; fix the env (or its env.make_kwargs), or "
        "check that what it needs is installed"
    )


def checked_env_factory(fn: Callable[[], gym.Env], index: int = 0) -> Callable[[], gym.Env]:
    """``fn`` checked when it runs (see :func:`make_env_fns`): a factory that raises, returns
    no env or an env without spaces gets a one-line rlblocks error naming it."""
    return _made_env(fn, index, _factory_label(fn))


def _made_env(fn: Callable[[], gym.Env], index: int, what: str) -> Callable[[], gym.Env]:
    """``fn`` checked when it runs: an env factory that raises is an EnvWorkerError naming it,
    one that returns something other than an env (None: a factory that forgot ``return``) or an
    env without spaces is a ConfigError saying what to return."""

    def make() -> gym.Env:
        try:
            env = fn()
        except RlblocksError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise EnvWorkerError(
                f"the env factory {what} raised {type(exc).__name__}"
                + (f": {text}" if text else "")
                + f" while making env {index}; fix the factory (it must return a new env)"
            ) from exc
        problem = env_problem(env)
        if problem is not None:
            with contextlib.suppress(Exception):
                env.close()  # type: ignore[union-attr]
            raise ConfigError(f"the env factory {what} returned {problem}")
        return env

    return make


def env_problem(env: Any) -> str | None:
    """Why ``env`` is no env a run can use (not an env, or an env without spaces), as the
    end of a sentence; None when it is one."""
    if env is None:
        return "None, not a gymnasium env; return the env it makes (lambda: gym.make(...))"
    if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
        return (
            f"a {type(env).__name__}, not a gymnasium env (it has no reset() and step()); "
            "return a gymnasium.Env"
        )
    for which in ("observation", "action"):
        space = getattr(env, f"{which}_space", None)
        if not isinstance(space, gym.Space):
            return (
                f"an env without an {which} space ({type(env).__name__}.{which}_space is "
                f"{'missing' if space is None else repr(space)}); set self.observation_space "
                "and self.action_space in the env's __init__"
            )
    return None


def env_spec(env_id: str, trusted: bool = True) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``; ``"module:EnvId-v0"`` imports ``module`` first (as
    ``gymnasium.make`` does), which runs its code: ``trusted=False`` (an id read from someone's run
    directory) refuses to import a module that is not imported yet."""
    module, sep, bare = env_id.rpartition(":")
    if sep:
        if module not in sys.modules and not trusted:
            raise ConfigError(
                f"the env {env_id!r} comes from the module {module!r}, and importing it runs its "
                f"code; {trust_advice(module)}"
            )
        try:
            import_env_module(module)
        except ImportError as exc:
            raise ConfigError(
                f"env {env_id!r}: cannot import {module!r} ({exc}); is it installed, in the "
                "current directory or on PYTHONPATH?"
            ) from exc
    import_env_namespace(env_id)
    try:
        return gym.spec(bare if sep else env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"unknown gymnasium env id {env_id!r}: {exc}") from exc


def check_env_id(env_id: str, trusted: bool = True) -> None:
    """Refuse, with a clear error, an env id that no run could make: an unknown gymnasium id, a
    namespace whose package is missing, a PettingZoo ``module:parallel_env`` that does not import.
    ``trusted`` as in :func:`env_spec`."""
    family = env_family(env_id)
    if family is not None:
        family[1].check_env_id(env_id, trusted=trusted)
    else:
        env_spec(env_id, trusted=trusted)


def make_vector_env(
    backend: str,
    env: EnvSource,
    num_envs: int = 1,
    seed: int | None = None,
    make_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Any] = (),
    **options: Any,
) -> Any:
    """Build a vector env with the named backend, e.g. ``make_vector_env("dummy", "CartPole-v1",
    num_envs=8, seed=0)``; with ``seed`` the envs are reset once, env ``i`` with ``seed + i``."""
    cls = get_registry("env").load(backend)
    venv = cls(
        make_env_fns(env, num_envs, make_kwargs, wrappers),
        **_config_options("env", backend, options),
    )
    if seed is not None:
        try:
            venv.reset(seed=seed)
        except BaseException:
            venv.close()  # its workers must not outlive a vector env nobody gets back
            raise
    return venv


#: ``make_buffer`` options that belong to the buffer itself rather than to one of its parts
_BUFFER_OWN = ("stack_num", "ignore_obs_next", "seed", "storage", "path")


def make_buffer(
    name: str,
    size: int,
    num_envs: int = 1,
    *,
    sampler: str | None = None,
    relabel: str | None = None,
    writer: str | None = None,
    **options: Any,
) -> Any:
    """Build a replay buffer from parts by name, e.g.
    ``make_buffer("vector", size=100_000, num_envs=8, sampler="prioritized", relabel="her",
    storage="memmap", path="buf/", stack_num=4, alpha=0.6)``.

    ``name`` names the layout (``"replay"``, ``"vector"``), or another part, which then goes on
    that part's default layout (``make_buffer("prioritized", ...)``). ``options`` are the
    buffer's own (``stack_num, ignore_obs_next, seed, storage, path``) and every chosen part's
    (``rlblocks list buffer --details`` lists them); an unknown one is an error naming the
    options there are."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ConfigError(f"buffer size must be an int >= 1, got {size!r}")
    from rlblocks.replay import ReplayBuffer, build_part, resolve_part_names

    parts = resolve_part_names(name, sampler, relabel, writer)
    own = {k: options.pop(k) for k in _BUFFER_OWN if k in options}
    per_part: dict[str, dict[str, Any]] = {}
    claimed: set[str] = set()
    for kw, part_name in parts.items():
        spec = spec_lookup("buffer", part_name)
        fields = {a.name for a in attrs.fields(spec.config) if a.init} if spec.config else set()
        mine = {k: v for k, v in options.items() if k in fields}
        claimed |= mine.keys()
        per_part[kw] = _config_options("buffer", part_name, mine)
    unknown = sorted(set(options) - claimed)
    if unknown:
        known = sorted({*_BUFFER_OWN, *(k for d in per_part.values() for k in d)})
        hints = {k: difflib.get_close_matches(k, known, n=1) for k in unknown}
        said = ", ".join(
            f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items()
        )
        raise ConfigError(
            f"buffer option(s) {said} belong to none of its parts {dict(parts)}; the options "
            f"are {known}"
        )
    size, num_envs = int(size), int(num_envs)
    _check_bookkeeping_fits(name, size)
    try:
        built = {kw: build_part(kw, n, per_part[kw], size, num_envs) for kw, n in parts.items()}
        return ReplayBuffer(size, num_envs, **own, **built)
    except (BufferFileError, ConfigError):
        raise
    except MemoryError as exc:
        raise ConfigError(
            f"buffer {name!r} of size {size}: {_first_line(exc)}; lower buffer.size (the "
            "transitions it holds), or keep its arrays on disk with buffer.storage=memmap"
        ) from exc
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"buffer {name!r}: {exc}") from exc


#: bytes of bookkeeping a buffer keeps in RAM per slot at the least (links, episode starts),
#: whatever its storage: a size whose bookkeeping alone exceeds the machine's memory is refused
#: before numpy is asked for it (a huge request can bring the process down instead of failing)
_BOOKKEEPING_BYTES = 16


def _check_bookkeeping_fits(name: str, size: int) -> None:
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: numpy's own error then
        return
    need = size * _BOOKKEEPING_BYTES
    if ram > 0 and need > ram:
        raise ConfigError(
            f"buffer {name!r} of size {size}: its bookkeeping alone needs {need / 2**30:,.0f} "
            f"GiB of memory, more than this machine's {ram / 2**30:,.0f} GiB; lower buffer.size "
            "(the transitions it holds)"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def buffer_options(section: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`make_buffer` a config's buffer section gives (its own
    fields and every part's options), without name, size and num_envs."""
    out: dict[str, Any] = {
        "sampler": section.sampler,
        "relabel": section.relabel,
        "writer": section.writer,
        "stack_num": section.stack_num,
        "ignore_obs_next": section.ignore_obs_next,
        "storage": section.storage,
        "path": section.path,
    }
    for part in (section.options or {}).values():
        out.update(options_dict(part))
    return out


def make_policy(
    name: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    device: str = "cpu",
    config: Any = None,
    state_space: gym.Space | None = None,
    *,
    encoder: Any = None,
    actor: Any = None,
    critic: Any = None,
    model: Any = None,
    trust_imports: bool = True,
    policy_class: type | None = None,
    **fields: Any,
) -> Any:
    """Build an algorithm's policy by name; ``fields`` override its config's defaults.
    ``state_space``: a multi-agent env's global state space, for policies whose constructor
    takes one (centralised critics); others do not get it.

    ``encoder``, ``actor``, ``critic`` and ``model`` are your own networks, each an
    ``nn.Module`` or a factory ``(observation_space, action_space) -> nn.Module``, for the
    parts the algorithm's spec lists in ``networks`` (``rlblocks describe ALGO``); each is
    checked once on a sample of the spaces. An ``encoder`` given as a string is the config
    field ``encoder``: an import path ``"package.module:factory"`` imported here (with the
    config's ``encoder_kwargs``); ``trust_imports=False`` (a config read from a run directory)
    refuses to import a module that is not imported yet. ``policy_class``: a subclass of the
    algorithm's policy class to build instead (with the same constructor arguments)."""
    reg = get_registry("algo")
    spec = reg.spec(name)
    _check_spaces(spec, observation_space, action_space, global_state=state_space is not None)
    if isinstance(encoder, str):
        fields["encoder"], encoder = encoder, None
    if isinstance(config, Mapping):  # a plain dict of fields, checked like a config file's
        fields, config = {**config, **fields}, None
    if config is None and spec.config is not None:
        config = cfg.structure_options(spec.config, fields, label=f"algo ({name})")
    elif fields:
        config = attrs.evolve(config, **fields)
    given = {"encoder": encoder, "actor": actor, "critic": critic, "model": model}
    networks = {part: net for part, net in given.items() if net is not None}
    check_networks(spec, networks)
    path = getattr(config, "encoder", None)
    if path is not None:
        if "encoder" not in spec.networks:
            raise ConfigError(
                f"$.algo.encoder: algo {name!r} takes no encoder of yours; {networks_taken(spec)}"
            )
        if "encoder" in networks:
            raise ConfigError(
                f"algo.encoder is {path!r} and an encoder module was passed too; give one of "
                "them (leave algo.encoder out, or the encoder argument)"
            )
        networks["encoder"] = network_factory(path, config.encoder_kwargs, trust_imports)
    elif getattr(config, "encoder_kwargs", None):
        raise ConfigError(
            "$.algo.encoder_kwargs are the arguments of algo.encoder, which is not set; set "
            "algo.encoder = 'package.module:factory' or leave encoder_kwargs out"
        )
    cls = reg.load(name)
    if policy_class is not None:
        if not (isinstance(policy_class, type) and issubclass(policy_class, cls)):
            raise ConfigError(
                f"policy_class must be {cls.__qualname__} (algo {name!r}) or a subclass of it, "
                f"got {policy_class!r}"
            )
        cls = policy_class
    extra: dict[str, Any] = {}
    if "state_space" in inspect.signature(cls).parameters:
        extra["state_space"] = state_space
    policy = cls(observation_space, action_space, config=config, device=device, **extra, **networks)
    _check_policy(policy, reg, name)
    return policy


def _check_policy(policy: Any, reg: Any, name: str) -> None:
    """A plugin's policy must be a BasePolicy that writes its own ``forward`` and ``learn``:
    said when it is built, naming the plugin, not as a NotImplementedError mid-run."""
    from rlblocks.algo import BasePolicy

    problem = None
    if not isinstance(policy, BasePolicy):
        problem = (
            f"it built a {type(policy).__qualname__}, which is not an rlblocks.algo.BasePolicy; "
            "subclass BasePolicy (or OffPolicyPolicy / OnPolicyPolicy), which the collector "
            "and trainers rely on"
        )
    else:
        missing = [m for m in ("forward", "learn")
                   if getattr(type(policy), m) is getattr(BasePolicy, m)]  # fmt: skip
        if missing:
            problem = (
                f"its policy {type(policy).__qualname__} does not implement "
                f"{' and '.join(missing)}, which BasePolicy leaves to each algorithm"
            )
    if problem:
        raise PluginLoadError(
            f"the algo plugin {name!r} from {reg.resolve(name).describe_source()} is invalid: "
            f"{problem}"
        )


def _handles(
    spec: AlgoSpec, observation_space: gym.Space, action_space: gym.Space, global_state: bool
) -> bool:
    obs_ok, act_ok = spec.observation_spaces, spec.action_spaces
    return (
        (global_state or not spec.needs_global_state)
        and (spec.action_masks or not has_action_mask(observation_space))
        and (not act_ok or type(action_space).__name__ in act_ok)
        and (not obs_ok or type(observation_space).__name__ in obs_ok)
    )


def _fits_run(spec: AlgoSpec, asked: AlgoSpec | None, global_state: bool) -> bool:
    """Whether ``spec`` could replace ``asked`` (the algorithm the run was given) in its run:
    algorithms that learn from a dataset only for a run that has one (``asked`` learns from one
    too), multi-agent ones only for a multi-agent env (one with a global state, or ``asked`` is
    multi-agent)."""
    with_dataset = asked is not None and (asked.training == "offline" or asked.uses_dataset)
    multi_agent = global_state or (asked is not None and asked.multi_agent)
    if (spec.training == "offline" or spec.uses_dataset) and not with_dataset:
        return False
    return multi_agent or not spec.multi_agent


def _algos_for(
    observation_space: gym.Space,
    action_space: gym.Space,
    global_state: bool = False,
    asked: AlgoSpec | None = None,
) -> str:
    """The installed algorithms whose specs accept these spaces (and, without a global state,
    need none) and that fit the run of ``asked`` (:func:`_fits_run`), for an error message."""
    # a broken plugin is left out: it must not hide the error being reported
    specs = get_registry("algo").loadable_specs()
    names = [
        name for name, spec in specs.items()
        if _handles(spec, observation_space, action_space, global_state)
        and _fits_run(spec, asked, global_state)
    ]  # fmt: skip
    if not names:
        return "no installed algorithm accepts these spaces"
    return f"installed algorithms that accept these spaces: {', '.join(names)}"


def space_problem(space: gym.Space, where: str = "") -> str | None:
    """Why a space holds nothing a policy could read or act on (an empty Dict or Tuple, a Box
    with a zero-sized axis, anywhere in a nest), as the end of a sentence; None when it holds
    something. ``where`` is the entry's path so far (``['mission']``)."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        items = list(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else list(
            enumerate(space.spaces)
        )
        if not items:
            kind = type(space).__name__
            return f"has an empty {kind}" + (f" at {where}" if where else "") + ", with no entries"
        for key, sub in items:
            problem = space_problem(sub, f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    shape = getattr(space, "shape", None)
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary) and (
        shape is not None and 0 in tuple(shape)
    ):
        at = f" at {where}" if where else ""
        return f"has a {type(space).__name__} of shape {tuple(shape)}{at}, which holds no value"
    return None


def _check_spaces(
    spec: AlgoSpec,
    observation_space: gym.Space,
    action_space: gym.Space,
    global_state: bool = False,
) -> None:
    """Refuse, naming the alternatives, an algorithm that cannot train on these spaces (or that
    needs a multi-agent env's global state, ``global_state`` False), and spaces that hold
    nothing (an empty Dict or Tuple, a Box of size 0)."""
    for which, space in (("observation", observation_space), ("action", action_space)):
        problem = space_problem(space)
        if problem is not None:
            raise ConfigError(
                f"the env's {which} space {space} {problem}; fix the env or drop the entry with "
                "a wrapper (env.wrappers)"
            )
    check_action_mask_space(observation_space, action_space)
    if _handles(spec, observation_space, action_space, global_state):
        return
    obs_ok, act_ok = spec.observation_spaces, spec.action_spaces
    obs, act = type(observation_space).__name__, type(action_space).__name__
    if has_action_mask(observation_space) and not spec.action_masks:
        raise ConfigError(
            f"the env masks actions (its observations carry an action_mask) and algo "
            f"{spec.name!r} does not honour masks, so it would take illegal actions; "
            f"{_algos_for(observation_space, action_space, global_state)} (honouring masks)"
        )
    if spec.needs_global_state and not global_state:
        raise ConfigError(
            f"algo {spec.name!r} learns from a multi-agent env's global state, and this env has "
            "none: train it on a PettingZoo env with state() (env.id = 'module:env_fn', e.g. "
            f"'mpe2.simple_spread_v3:parallel_env'); "
            f"{_algos_for(observation_space, action_space, global_state, spec)}"
        )
    if act_ok and act not in act_ok:
        problem = f"algo {spec.name!r} supports action spaces {list(act_ok)}, the env has {act}"
    else:
        problem = (
            f"algo {spec.name!r} supports observation spaces {list(obs_ok)}, the env has {obs}"
        )
    raise ConfigError(
        f"{problem}; {_algos_for(observation_space, action_space, global_state, spec)} (the env's "
        f"spaces: observation {obs}, action {act})"
    )


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_torch_threads(threads: int) -> None:
    """Refuse more torch threads than this process has cores: they only contend for them, and a
    huge number exhausts the threads the OS gives a process (torch then crashes in native
    code, with no message)."""
    cores = usable_cores()
    if threads > cores:
        raise ConfigError(
            f"$.run.torch_threads: {threads} is more than the {cores} CPU core(s) this process "
            f"may use; set it to at most {cores} (1, the default, is fastest for the networks of "
            "most RL runs; 0: one per core)"
        )


def check_training(c: cfg.ExperimentConfig, spec: AlgoSpec) -> None:
    """Refuse a trainer this version lacks, and frame stacks an on-policy buffer would break."""
    training = spec.training
    if training not in {"off-policy", "on-policy", "offline"}:
        raise ConfigError(
            f"algo {c.algo_name!r} needs the {training} trainer, which this rlblocks version "
            "does not ship yet"
        )
    check_offline(c, spec)
    if c.trainer.async_collect:
        check_async_collect(c, spec)
    check_run_fields(c, spec)
    frames = c.buffer.stack_num
    if frames > 1 and training == "on-policy":
        raise ConfigError(
            f"$.buffer.stack_num: {c.algo_name!r} trains on-policy from a buffer emptied "
            "after every update, so stacks read from it would lose the frames before each "
            "collect; stack frames in the env instead (env.wrappers = "
            '["gymnasium.wrappers:FrameStackObservation"] with kwargs {stack_size = '
            f"{frames}}}) and leave buffer.stack_num at 1"
        )


def check_run_fields(c: cfg.ExperimentConfig, spec: AlgoSpec) -> None:
    """Settings that contradict the algorithm or the env, found before anything is built:
    refused when the run would break or do something else than asked, warned about (a
    UserWarning) when they are legal but do nothing."""
    t, training = c.trainer, spec.training
    single_agent = env_family(c.env.id) is None
    if c.env.policy_mapping and single_agent:
        raise ConfigError(
            f"$.env.policy_mapping: maps the agents of a multi-agent env to policies, and "
            f"{c.env.id!r} is a single-agent env (one policy learns it); remove "
            "env.policy_mapping, or train on a multi-agent env (`rlblocks list family`)"
        )
    if spec.joint_agents and single_agent and c.env.factory is None:
        raise ConfigError(
            f"algo {c.algo_name!r} learns from the joint view of a multi-agent env (every "
            f"agent's observation and action in one step), and {c.env.id!r} has one agent; "
            "train it on a PettingZoo parallel env (e.g. --env "
            "mpe2.simple_spread_v3:parallel_env) or on an env factory returning a joint view, "
            "or train a single-agent algorithm"
        )
    if spec.multi_agent and single_agent and c.env.factory is None:
        twins = [
            name for name, other in get_registry("algo").loadable_specs().items()
            if other.impl == spec.impl and not other.multi_agent
        ]  # fmt: skip
        instead = f"train {' or '.join(twins)} for the same result" if twins else (
            "train a single-agent algorithm"
        )
        warnings.warn(
            f"algo {c.algo_name!r} is made for multi-agent envs, and {c.env.id!r} has one "
            f"agent: it trains as a single-agent algorithm of its policy class would; {instead}",
            UserWarning,
            stacklevel=2,
        )
    if training == "off-policy" and t.batch_size > c.buffer.size and c.buffer.dataset is None:
        raise ConfigError(
            f"$.trainer.batch_size: {t.batch_size} exceeds buffer.size={c.buffer.size}, so "
            "every batch would draw the same transitions many times over; lower "
            "trainer.batch_size or raise buffer.size"
        )
    n_step = getattr(c.algo, "n_step", None)
    if (
        training != "offline" and isinstance(n_step, int) and n_step > t.max_env_steps
    ):  # an offline budget counts gradient steps
        raise ConfigError(
            f"$.algo.n_step: {n_step} exceeds trainer.max_env_steps={t.max_env_steps}, so no "
            "return the run computes could sum that many rewards; lower algo.n_step or raise "
            "the budget"
        )
    defaults = {a.name: a.default for a in attrs.fields(cfg.TrainerConfig)}
    only = {
        "on-policy": ("repeat_per_collect", "episode_per_collect"),
        "off-policy": ("update_per_step", "warmup_steps"),
    }
    for kind, names in only.items():
        if training == kind:
            continue
        given = [n for n in names if getattr(t, n) != defaults[n]]
        if given:
            fields = ", ".join(f"trainer.{n}={getattr(t, n)!r}" for n in given)
            warnings.warn(
                f"{fields}: {'it applies' if len(given) == 1 else 'they apply'} to {kind} "
                f"algorithms, and {c.algo_name!r} trains {training}, so "
                f"{'it does' if len(given) == 1 else 'they do'} nothing; leave "
                f"{'it' if len(given) == 1 else 'them'} out",
                UserWarning,
                stacklevel=2,
            )


def check_buffer_fits(c: cfg.ExperimentConfig, spec: AlgoSpec, buffer: Any) -> None:
    """The run's buffer must give the algorithm what it learns from: windows of steps for a
    recurrent off-policy learner, single transitions for every other off-policy one."""
    sequences = BufferAbilities.of(buffer).sequences
    if spec.training != "off-policy":
        return
    # an algorithm recurrent by option (its config's ``recurrent``) counts as recurrent
    recurrent = spec.recurrent or getattr(c.algo, "recurrent", False) is True
    if recurrent and not sequences:
        raise ConfigError(
            f"$.buffer.sampler: algo {c.algo_name!r} is recurrent and learns from sequences, "
            "but the buffer samples single transitions; set buffer.sampler=sequence (and "
            "buffer.length, the window)"
        )
    if sequences and not recurrent:
        raise ConfigError(
            f"$.buffer.sampler: {c.buffer.sampler!r} samples windows of steps for recurrent "
            f"algorithms, and {c.algo_name!r} learns from single transitions; leave "
            "buffer.sampler out (or pick a transition sampler: uniform, prioritized)"
        )


def async_backends() -> list[str]:
    """The installed vector-env backends that step envs asynchronously (their spec says so)."""
    specs = get_registry("env").loadable_specs()
    return [name for name, spec in specs.items() if getattr(spec, "supports_async", False)]


def check_async_collect(c: cfg.ExperimentConfig, spec: AlgoSpec) -> None:
    """``trainer.async_collect`` needs an off-policy, single-agent run that collects
    ``step_per_collect`` steps, and a backend that can step some envs while others run."""
    where = "$.trainer.async_collect"
    if spec.training != "off-policy":
        why = (
            "an on-policy update must learn from steps its own policy acted, and steps still "
            "running at an update would be stored after it"
            if spec.training == "on-policy"
            else "an offline run collects no env steps"
        )
        raise ConfigError(
            f"{where}: algo {c.algo_name!r} trains {spec.training}: {why}; set "
            "trainer.async_collect=false"
        )
    family = env_family(c.env.id)
    if family is not None and not family[0].supports_async:
        raise ConfigError(
            f"{where}: {c.env.id!r} is an env of the {family[0].name!r} family "
            f"({family[0].summary}), whose envs are collected synchronously; set "
            "trainer.async_collect=false"
        )
    t = c.trainer
    if t.batch_mode != "truncate_episodes" or t.rollout_fragment_length is not None:
        what = (
            f"rollout_fragment_length={t.rollout_fragment_length}"
            if t.rollout_fragment_length is not None
            else f"batch_mode={t.batch_mode!r}"
        )
        raise ConfigError(
            f"{where}: trainer.{what} steps every env together, which asynchronous collection "
            "does not; use one or the other"
        )
    backend = c.env.backend
    if backend == "auto" or backend not in get_registry("env"):
        return  # auto is checked on the vector env it builds; an unknown name is named there
    if not getattr(spec_lookup("env", backend), "supports_async", False):
        raise ConfigError(f"{where}: {async_backend_problem(f'the {backend!r} backend')}")


def async_backend_problem(what: str) -> str:
    """Why ``what`` (a backend, described) cannot collect asynchronously, and which installed
    backends can."""
    able = async_backends()
    fix = (
        f"pick one that does with env.backend ({', '.join(able)})"
        if able
        else (
            "install a backend plugin that does (rlblocks-env-subproc, for one: from the "
            "rlblocks repository, pip install ./plugins/envs/subproc)"
        )
    )
    return f"{what} steps all its envs together; {fix}"


def check_offline(c: cfg.ExperimentConfig, spec: AlgoSpec) -> None:
    """An offline algorithm needs a dataset and a gradient-step budget and takes no env step;
    an online one refuses both (each would be ignored silently otherwise), except that one whose
    spec says ``uses_dataset`` (GAIL) needs the dataset."""
    t = c.trainer
    if spec.training != "offline":
        if spec.uses_dataset:
            _check_online_dataset(c, spec)
        elif c.buffer.dataset is not None:
            raise ConfigError(
                f"$.buffer.dataset: algo {c.algo_name!r} trains {spec.training} from its own "
                "env steps and learns from no dataset; remove buffer.dataset (--dataset), or "
                "train an offline algorithm (`rlblocks list algo --details` shows training: "
                "offline)"
            )
        if t.max_gradient_steps is not None:
            raise ConfigError(
                f"$.trainer.max_gradient_steps: algo {c.algo_name!r} trains {spec.training} and "
                "its budget is trainer.max_env_steps (--max-env-steps); remove "
                "max_gradient_steps (--max-gradient-steps), which only offline algorithms use"
            )
        return
    if c.buffer.dataset is None:
        raise ConfigError(
            f"$.buffer.dataset: algo {c.algo_name!r} trains offline from a dataset and none is "
            "given; pass --dataset FILE (buffer.dataset=FILE): an hdf5 file written by "
            "ReplayBuffer.save_hdf5, or an online run's RUN_DIR/checkpoints/gen-N/buffer.h5; or "
            "a Minari dataset, by its directory or its id"
        )
    if t.max_gradient_steps is None:
        raise ConfigError(
            f"$.trainer.max_gradient_steps: algo {c.algo_name!r} trains offline and its budget "
            "is in gradient steps; pass --max-gradient-steps N (trainer.max_gradient_steps=N)"
        )
    if getattr(c.algo, "intrinsic", None) is not None:
        raise ConfigError(
            f"$.algo.intrinsic: algo {c.algo_name!r} trains offline from a fixed dataset, where "
            f"a curiosity bonus ({c.algo.intrinsic!r}) rewards nothing it can explore; remove "
            "algo.intrinsic, or use it with an online algorithm (dqn, ppo, sac ...)"
        )
    family = env_family(c.env.id)
    if family is not None and not family[0].supports_offline:
        raise ConfigError(
            f"$.env.id: offline training from a dataset is for gymnasium's envs; {c.env.id!r} "
            f"is an env of the {family[0].name!r} family ({family[0].summary})"
        )


def _check_online_dataset(c: cfg.ExperimentConfig, spec: AlgoSpec) -> None:
    """An online algorithm that also learns from a dataset (``uses_dataset``) needs one, on a
    gymnasium env (not an env family's)."""
    if c.buffer.dataset is None:
        raise ConfigError(
            f"$.buffer.dataset: algo {c.algo_name!r} trains {spec.training} and also learns "
            "from a dataset, and none is given; pass --dataset FILE (buffer.dataset=FILE): an "
            "hdf5 file written by ReplayBuffer.save_hdf5, or a Minari dataset, by its directory "
            "or its id"
        )
    family = env_family(c.env.id)
    if family is not None:
        raise ConfigError(
            f"$.env.id: algo {c.algo_name!r} learns from a dataset besides its env steps, which "
            f"runs on gymnasium's envs; {c.env.id!r} is an env of the {family[0].name!r} family "
            f"({family[0].summary})"
        )


def preflight(config: cfg.ExperimentConfig) -> None:
    """Check a resolved config as a run checks it before it trains, keeping nothing: the env id,
    the device, the loggers and their options, the trainer the algorithm needs, frame stacking,
    and whether the algorithm handles the env's spaces (one env is made with the run's wrappers
    to read them, then closed), and what training builds from them: the policy (on the CPU)
    and an online run's buffer (in memory; a memory-mapped one's directory is only checked, so
    that nothing is written). ``rlblocks train --dry-run`` runs it. What only a running run can
    tell (what the envs return) is left to the run."""
    spec = spec_lookup("algo", config.algo_name)
    check_env_id(config.env.id)
    resolve_device(config.run.device)
    check_torch_threads(config.run.torch_threads)
    logger_configs(config.run)
    check_training(config, spec)
    reads_dataset = spec.training == "offline" or spec.uses_dataset
    if reads_dataset and not Path(str(config.buffer.dataset)).is_file():
        raise ConfigError(
            f"$.buffer.dataset: {config.buffer.dataset} is not a file; pass --dataset FILE with "
            "an hdf5 file written by ReplayBuffer.save_hdf5"
        )
    spaces = env_spaces(config)
    check_env_spaces(spec, spaces)
    if spec.training != "offline" and env_family(config.env.id) is None:
        options = buffer_options(config.buffer)
        if options["storage"] == "memmap":
            if options["path"] is not None:
                problem = writable_dir_problem(options["path"])
                if problem is not None:
                    raise ConfigError(f"$.buffer.path: {problem}")
        else:
            buffer = make_buffer(config.buffer.name, config.buffer.size, config.env.num_envs,
                                 **options)  # fmt: skip
            check_buffer_fits(config, spec, buffer)
            del buffer
    if spaces is not None:
        make_policy(config.algo_name, *spaces, device="cpu", config=config.algo)


def check_env_spaces(spec: Any, spaces: tuple[gym.Space, gym.Space] | None) -> None:
    """Refuse an algorithm (``spec``) that cannot take an env's ``(observation, action)``
    spaces (from :func:`env_spaces`), as a run refuses it; None (a multi-agent env, checked per
    agent as its run builds) passes."""
    if spaces is not None:
        _check_spaces(spec, *spaces)


def env_spaces(config: cfg.ExperimentConfig) -> tuple[gym.Space, gym.Space] | None:
    """The observation (frame stacking applied) and action spaces a run's algorithm gets from
    ``config``'s env: one env is made with the run's wrappers to read them, then closed. None
    for an env family's env (a multi-agent env's spaces are per agent)."""
    if env_family(config.env.id) is not None:
        return None
    wrappers = [*config.env.wrappers, *config.env.train_wrappers]
    (make,) = make_env_fns(config.env.id, 1, config.env.make_kwargs, wrappers)
    env = make()
    try:
        return stacked_space(env.observation_space, config.buffer.stack_num), env.action_space
    finally:
        env.close()


def installed_default_loggers(warn: bool = True) -> list[str]:
    """The default loggers (:data:`DEFAULT_LOGGERS`) that are installed. Each one that is not
    is left out with a warning (``warn``) naming the command that installs it, so a minimal
    install (core and one algorithm) trains; ``tests.csv`` records every test without any."""
    installed = set(get_registry("logger").names())
    kept = [name for name in cfg.DEFAULT_LOGGERS if name in installed]
    missing = [name for name in cfg.DEFAULT_LOGGERS if name not in installed]
    if warn and missing:
        hints = "; ".join(f"{n}, {install_hint('logger', n)}" for n in missing)
        off = option("loggers=[]", "--no-default-loggers")
        warnings.warn(
            f"the default logger{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not installed and left out (tests.csv still "
            f"records every test); to install: {hints}; {off} leaves the defaults out",
            UserWarning,
            stacklevel=2,
        )
    return kept


def logger_configs(run: cfg.RunConfig) -> dict[str, Any]:
    """Each of ``run.loggers`` with its options built from ``run.logger_options`` (None for a
    logger without a config class): an unknown logger name, a bad option, options given to a
    logger that takes none, or options for a logger not in the list raise ConfigError."""
    built: dict[str, Any] = {}
    for name in run.loggers:
        spec = spec_lookup("logger", name)
        options = dict(run.logger_options.get(name) or {})
        if spec.config is None:
            if options:
                raise ConfigError(f"logger {name!r} takes no options, got {sorted(options)}")
            built[name] = None
        else:
            label = f"logger ({name})"
            built[name] = cfg.structure_options(
                spec.config, options, label=label, root=f"$.run.logger_options.{name}"
            )
    unused = sorted(set(run.logger_options) - set(run.loggers))
    if unused:
        raise ConfigError(
            f"run.logger_options names {unused}, which are not among run.loggers "
            f"{list(run.loggers)}"
        )
    return built


def _device_option(device: str) -> str:
    """How the reader picks ``device``: the ``--device`` flag of train, resume and eval, a
    ``--set`` of ``run.device`` for tune, the ``device`` argument in Python."""
    if current_command() == "tune":
        return f"--set run.device={device}"
    return option(f"device={device!r}", f"--device {device}")


def resolve_device(device: str) -> str:
    """``device`` checked against what torch sees: ``"auto"`` is CUDA when torch has a GPU, else
    the CPU; a misspelled or unavailable device is a one-line ConfigError."""
    name = str(device).strip()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"unknown device {name!r}; use cpu, cuda, cuda:N, mps or auto") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {name!r}: torch {torch.__version__} sees no CUDA GPU here; use "
                f"{_device_option('cpu')} (or auto, which falls back to the CPU)"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r}: torch sees no Apple GPU here; use cpu or auto")
    elif dev.type not in {"cpu", "cuda", "mps"}:
        raise ConfigError(f"device {name!r} is not supported; use cpu, cuda, cuda:N, mps or auto")
    return str(dev)
