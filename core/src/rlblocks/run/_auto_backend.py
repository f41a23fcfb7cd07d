"""``backend="auto"``: pick the in-process or a multi-process backend from a short measurement.

The choice is a cost model fed with two numbers measured on one env built in this process: the
seconds one ``env.step`` takes (random actions, about ``probe_seconds`` of stepping) and the bytes
of one observation. Per vector step of ``N`` envs:

    in-process     N * step
    multi-process  ceil(N / W) * step + ipc(W) + N * obs_bytes / copy_rate,   W = min(N, cores)

and for a backend that can step a share of the envs in the calling process (its config has
``local_envs``, as subproc and shmem do): ``L = ceil((N + 1) / C)`` envs there while ``C - 1``
workers step the other ``R = N - L``,

    shared         max(L * step + parent, ceil(R / (C - 1)) * step + spin_ipc)
                   + R * obs_bytes / copy_rate

(``parent``: the calling process's own cost of sending, collecting and joining a step;
``spin_ipc``: a round trip to a worker that busy-polls between commands, as theirs do by default
when each has a core).

``ipc`` is the round trip of a command to ``W`` workers on a loaded machine. The multi-process
backend must win by ``margin`` to be picked, since it also costs processes and start-up time.

A backend that runs the env id natively (one whose spec's ``provides`` accepts it: EnvPool) is
not assumed faster: it is built over all the envs and stepped for about ``probe_seconds``, and
declined when its measured time per vector step is clearly above stepping the envs in-process
(EnvPool's thread hand-off pays from about four MuJoCo envs on two cores and loses with one or
two); then the plans above decide.

``auto`` asks for speed over isolation: the in-process and shared plans step envs in the
calling process, where an env that crashes or hangs stops training (a multi-process backend
named explicitly keeps every env in a worker by default). The printed choice says when it
does.
Backends are found through the registry (``multiprocess`` and ``supports_async`` of their specs),
never imported by name, so any installed plugin can be chosen. A backend whose class has
``observation_space_problem(space) -> str | None`` is asked first whether it can carry the env's
observations (shmem cannot carry ``Text``): one that says no is not chosen.

Options of the multi-process backends (:data:`FORWARDED`: ``worker_timeout``,
``restart_failed``...) can be given to ``auto`` too: they go to the chosen backend, checked
against its own config, and giving one limits the choice to the backends that take it (a
worker timeout means nothing to envs stepped in this process). ``restart_failed``,
``worker_timeout`` or ``num_workers`` also keep every env in a worker (no shared plan), since
they ask for the isolation a worker gives. None means not given (every route here, run
configs and ``make_vector_env`` alike, passes each unset option as None), so ``auto`` cannot
forward ``worker_timeout=None`` ("no time limit"): pass ``worker_timeout=float("inf")``, which
the process backends take as no limit.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from rlblocks.contracts import ConfigError
from rlblocks.plugins import get_registry

#: Seconds of one command round trip per worker and a fixed part (measured on a 2-core box).
IPC_FIXED_S = 150e-6
IPC_PER_WORKER_S = 60e-6
COPY_BYTES_PER_S = 2e9
#: The shared plan (same 2-core box): the parent's bookkeeping per vector step, and the round
#: trip to a worker that spins between commands.
SHARED_PARENT_S = 50e-6
SHARED_IPC_S = 80e-6
#: Preference among multi-process backends (others installed come after, by name).
PREFERRED = ("shmem", "subproc")
NEVER_AUTO = ("auto", "ray")  # ray is for going past one machine: ask for it by name
#: A native backend is declined when its measured time per vector step exceeds the in-process
#: estimate by more than 1 / NATIVE_MARGIN.
NATIVE_MARGIN = 0.9
#: Options ``auto`` takes for the backend it chooses (fields of ``AutoBackendConfig``; None
#: there means not given).
FORWARDED = (
    "num_workers", "local_envs", "context", "worker_timeout", "start_timeout", "restart_failed",
    "max_restarts", "worker_spin_us",
)
#: Forwarded options that ask for every env in a worker: no shared plan when one is given.
ISOLATING = ("num_workers", "worker_timeout", "restart_failed")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _nbytes(obs: Any) -> int:
    if isinstance(obs, dict):
        return sum(_nbytes(v) for v in obs.values())
    if isinstance(obs, tuple):
        return sum(_nbytes(v) for v in obs)
    return int(np.asarray(obs).nbytes)


def measure_env(env_fn: Callable[[], gym.Env], probe_seconds: float = 0.2) -> tuple[float, int]:
    """``(seconds per env.step, bytes per observation)`` of the env ``env_fn`` builds."""
    step_s, nbytes, _ = _probe_env(env_fn, probe_seconds)
    return step_s, nbytes


def _probe_env(
    env_fn: Callable[[], gym.Env], probe_seconds: float
) -> tuple[float, int, gym.Space]:
    """:func:`measure_env`, plus the env's observation space."""
    env = env_fn()
    try:
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        nbytes = _nbytes(obs)
        actions = [env.action_space.sample() for _ in range(32)]
        steps, start = 0, time.perf_counter()
        end = start + probe_seconds
        while True:
            _, _, term, trunc, _ = env.step(actions[steps % 32])
            steps += 1
            if term or trunc:
                env.reset()
            if steps >= 10 and time.perf_counter() >= end:
                break
        return (time.perf_counter() - start) / steps, nbytes, env.observation_space
    finally:
        env.close()


def choose_backend(
    num_envs: int, step_s: float, obs_bytes: int, installed: dict[str, Any],
    cores: int | None = None, margin: float = 0.9, isolate: bool = False,
) -> tuple[str, dict[str, Any], str]:
    """``(backend name, options, reason)`` for ``num_envs`` envs with the measured costs.

    ``installed`` maps backend names to their specs (``multiprocess`` tells the kinds apart);
    ``isolate`` leaves out the shared plan (envs stepped in this process next to workers)."""
    cores = _cores() if cores is None else cores
    local = sorted(n for n, s in installed.items() if not s.multiprocess and n not in NEVER_AUTO)
    multi = [n for n, s in installed.items() if s.multiprocess and n not in NEVER_AUTO]
    multi.sort(key=lambda n: (PREFERRED.index(n) if n in PREFERRED else len(PREFERRED), n))
    if not local and not multi:
        raise ConfigError(
            "backend='auto' found no env backend installed; install rlblocks-env-dummy (from "
            "the rlblocks repository: pip install ./plugins/envs/dummy)"
        )
    in_s = num_envs * step_s
    cost = f"env step {step_s * 1e6:.0f} us, obs {obs_bytes} B, {num_envs} envs, {cores} cores"
    workers = max(1, min(num_envs, cores))
    options: dict[str, Any] = {"num_workers": workers}
    mp_s = (
        math.ceil(num_envs / workers) * step_s
        + IPC_FIXED_S + IPC_PER_WORKER_S * workers
        + num_envs * obs_bytes / COPY_BYTES_PER_S
    )
    plan = f"{workers} workers"
    if (multi and not isolate and cores > 1 and num_envs > 1
            and _takes_local_envs(installed[multi[0]])):
        n_local = min(math.ceil((num_envs + 1) / cores), num_envs - 1)
        remote = num_envs - n_local
        w = max(1, min(remote, cores - 1))
        shared_s = max(
            n_local * step_s + SHARED_PARENT_S,
            math.ceil(remote / w) * step_s + SHARED_IPC_S,
        ) + remote * obs_bytes / COPY_BYTES_PER_S
        if shared_s < mp_s:
            workers, mp_s = w, shared_s
            options = {"num_workers": w, "local_envs": n_local}
            plan = f"{n_local} envs here and {w} worker(s)"
    if multi and (not local or ((workers > 1 or "local_envs" in options)
                  and mp_s < margin * in_s)):
        why = (f"{cost}: {plan} need ~{mp_s * 1e6:.0f} us per vector step, in-process "
               f"~{in_s * 1e6:.0f} us")
        if options.get("local_envs"):
            last = options["local_envs"] - 1
            envs = "env 0" if last == 0 else f"envs 0-{last}"
            why += (f"; speed over isolation: {envs} step in this process, where an env that "
                    f"crashes or hangs stops training (backend={multi[0]!r} by name keeps "
                    "every env in a worker)")
        return multi[0], options, why
    why = f"{cost}: in-process ~{in_s * 1e6:.0f} us per vector step"
    if multi:
        why += (f", {plan} ~{mp_s * 1e6:.0f} us (IPC costs more than it saves); speed over "
                "isolation: an env that crashes or hangs stops training (backend="
                f"{multi[0]!r} by name keeps every env in a worker)")
    return local[0], {}, why


def _takes_local_envs(spec: Any) -> bool:
    """Whether a backend's config has ``local_envs`` (it can step envs in this process)."""
    return "local_envs" in _option_names(spec)


def _option_names(spec: Any) -> set[str]:
    """The options a backend's config takes (none without a config)."""
    config = getattr(spec, "config", None)
    try:
        return set(attrs.fields_dict(config)) if config is not None else set()
    except (TypeError, attrs.exceptions.NotAnAttrsClassError):
        return set()


def _space_problems(
    installed: dict[str, Any], space: gym.Space, load: Callable[[str], Any]
) -> dict[str, str]:
    """``{backend: why}`` for the multi-process backends that cannot carry observations of
    ``space`` (their class's ``observation_space_problem`` says so); only those are imported."""
    problems = {}
    for name, spec in installed.items():
        if not spec.multiprocess:
            continue
        try:
            check = getattr(load(name), "observation_space_problem", None)
            problem = check(space) if callable(check) else None
        except Exception as exc:  # a broken optional backend must not stop the others
            problem = f"it failed to import: {exc!r}"
        if problem:
            problems[name] = problem
    return problems


def _forwarded_options(
    given: Mapping[str, Any], installed: dict[str, Any]
) -> dict[str, Any]:
    """The installed backends that take every option in ``given`` (all of them when none is
    given); a ConfigError naming the options when no backend auto may choose takes them."""
    if not given:
        return installed
    # an isolating option asks for envs in workers: the in-process backend's own
    # worker_timeout (a watchdog in this process) does not make it a taker
    isolating = any(k in ISOLATING for k in given)
    takers = {
        n: s
        for n, s in installed.items()
        if set(given) <= _option_names(s) and (s.multiprocess or not isolating)
    }
    if takers:
        return takers
    names = ", ".join(sorted(given))
    raise ConfigError(
        f"backend='auto' was given {names}, which no backend it may choose takes "
        f"(installed: {sorted(installed)}); install rlblocks-env-subproc (from the rlblocks "
        "repository: pip install ./plugins/envs/subproc), or name a backend "
        "that takes them (backend='subproc')"
    )


def measure_vector_env(
    factory: Callable[..., Any], env_fns: Sequence[Callable[[], gym.Env]],
    probe_seconds: float = 0.2,
) -> float:
    """Seconds per vector step of the backend ``factory`` builds over ``env_fns``, stepping
    random actions (finished envs reset, as the collector does): a few untimed steps, then
    three windows of about ``probe_seconds / 3``, the fastest counted, so that a thread pool's
    start or a moment of load elsewhere does not decide. The probed instance is closed: the
    caller builds a fresh one, so the probe leaves no mark on a seeded run."""
    venv = factory(list(env_fns))
    try:
        n = venv.num_envs
        space = venv.action_space
        space.seed(0)
        venv.reset(seed=0)
        actions = [np.stack([space.sample() for _ in range(n)]) for _ in range(8)]
        steps = 0

        def step() -> None:
            nonlocal steps
            _, _, term, trunc, _ = venv.step(actions[steps % 8])
            steps += 1
            done = np.flatnonzero(np.logical_or(term, trunc))
            if done.size:
                venv.reset(done)

        for _ in range(5):
            step()
        best = math.inf
        for _ in range(3):
            first, start = steps, time.perf_counter()
            end = start + probe_seconds / 3
            while steps - first < 5 or time.perf_counter() < end:
                step()
            best = min(best, (time.perf_counter() - start) / (steps - first))
        return best
    finally:
        venv.close()


def _native_backend(env_fn: Callable[[], gym.Env], installed: dict[str, Any]) -> str | None:
    """The first installed backend (by name) whose spec's ``provides`` accepts this env."""
    from rlblocks.plugins import import_object

    for name in sorted(installed):
        path = getattr(installed[name], "provides", None)  # specs of other kinds lack it
        if path is None:
            continue
        try:
            if import_object(path)(env_fn):
                return name
        except Exception:  # a broken optional backend must not stop the others
            continue
    return None


def make_auto_vector_env(
    env_fns: Sequence[Callable[[], gym.Env]], probe_seconds: float = 0.2, verbose: bool = True,
    asynchronous: bool = False, **backend_options: Any,
) -> Any:
    """Build the backend that ``choose_backend`` picks for these envs; says which and why (on
    stderr when ``verbose``, and always in the returned env's ``auto_choice`` attribute).

    ``backend_options`` (names in :data:`FORWARDED`; None: not given) go to the chosen backend,
    checked against its config; only backends that take them all are considered, and with
    ``asynchronous`` only those that step envs asynchronously (their spec's
    ``supports_async``)."""
    unknown = sorted(set(backend_options) - set(FORWARDED))
    if unknown:
        raise ConfigError(
            f"backend='auto' does not take {', '.join(unknown)}; it takes probe_seconds, "
            f"verbose and the options it passes on: {', '.join(FORWARDED)}"
        )
    given = {k: v for k, v in backend_options.items() if v is not None}
    reg = get_registry("env")
    installed = {n: s for n, s in reg.loadable_specs().items() if n not in NEVER_AUTO}
    installed = _forwarded_options(given, installed)
    if asynchronous:
        installed = {n: s for n, s in installed.items() if getattr(s, "supports_async", False)}
        if not installed:
            raise ConfigError(
                "backend='auto' was asked for a backend that steps envs asynchronously "
                "(trainer.async_collect) and none that it may choose is installed"
                + (f" that also takes {', '.join(sorted(given))}" if given else "")
                + "; install rlblocks-env-subproc (from the rlblocks repository: pip install "
                "./plugins/envs/subproc), or name one with "
                "env.backend"
            )
    step_s, obs_bytes, space = _probe_env(env_fns[0], probe_seconds)
    refused = _space_problems(installed, space, reg.load)
    usable = {n: s for n, s in installed.items() if n not in refused}
    if not usable:
        raise ConfigError(
            "backend='auto' found no backend for these options and observations: "
            + "; ".join(f"{n}: {why}" for n, why in refused.items())
        )
    isolate = any(k in given and given[k] is not False for k in ISOLATING)
    name, options, why = choose_backend(
        len(env_fns), step_s, obs_bytes, usable, isolate=isolate
    )
    if asynchronous:
        why += f"; only backends that step envs asynchronously considered: {sorted(usable)}"
    if given:
        why += (f"; only backends taking {', '.join(sorted(given))} considered: "
                f"{sorted(usable)}")
    if refused:
        why += "; not " + ", ".join(f"{n!r} ({problem})" for n, problem in refused.items())
    native = _native_backend(env_fns[0], usable)
    if native is not None:
        # a native engine (EnvPool) hands each call to its threads: that pays with several
        # envs and loses with one (HalfCheetah-v5, 1 env: 8k env steps/s through EnvPool
        # against 22k in-process), so it is measured, not assumed. It is declined only when
        # clearly slower than stepping the envs here: with more than one thread its speed
        # depends on where the OS puts them, decided anew for each pool (README of
        # rlblocks-env-envpool), so a near tie says little about the pool built next
        in_s = len(env_fns) * step_s
        try:
            native_s = measure_vector_env(reg.load(native), env_fns, probe_seconds)
        except Exception as exc:  # a broken optional backend must not stop the others
            native_s = math.inf
            why += f"; {native!r} runs this env id natively but failed to step it: {exc!r}"
        if native_s * NATIVE_MARGIN <= in_s:
            name, options = native, {}
            why = (f"it runs this env id natively: ~{native_s * 1e6:.0f} us per vector step "
                   f"measured, in-process ~{in_s * 1e6:.0f} us")
        elif math.isfinite(native_s):
            why += (f"; {native!r} runs this env id natively but measured "
                    f"~{native_s * 1e6:.0f} us per vector step, slower than in-process")
    if given:
        options = _checked_options(name, usable[name], {**options, **given})
    venv = reg.load(name)(list(env_fns), **options)
    given_as = ", ".join(f"{k}={v!r}" for k, v in options.items())
    choice = f"backend='auto' chose {name!r}" + (f" with {given_as}" if given_as else "")
    choice += f" ({why})"
    with contextlib.suppress(AttributeError):  # a backend with __slots__ keeps no note
        venv.auto_choice = choice
    if verbose:
        print(choice, file=sys.stderr, flush=True)
    return venv


def _checked_options(name: str, spec: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against the chosen backend's config, as if given to it by name:
    a ConfigError names the field and the backend."""
    from rlblocks.run import _config as cfg

    built = cfg.structure_options(
        spec.config, dict(options), label=f"env ({name}, chosen by auto)"
    )
    return {k: getattr(built, k) for k in options}
