"""Options of the subproc backend (public: the shmem backend shares them); attrs only."""

from __future__ import annotations

from attrs import define, field, validators

CONTEXTS = ("fork", "spawn", "forkserver")


def _positive_or_none(_inst: object, attribute: object, value: float | None) -> None:
    if value is not None and not value > 0:  # NaN is refused too
        raise ValueError(f"{attribute.name} must be positive or None, got {value!r}")  # type: ignore[attr-defined]


@define(kw_only=True)
class SubprocConfig:
    """Options of the multi-process backends (subproc and shmem share them)."""

    num_workers: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Worker processes; each steps about ``(num_envs - local_envs) / num_workers`` envs per
    command. None: one per available CPU core, less the one the calling process uses when it
    steps envs itself (``local_envs``), at most one per env."""
    local_envs: int | None = field(default=0, validator=validators.optional(validators.ge(0)))
    """Envs stepped in the calling process while the workers step theirs (envs ``0 ..
    local_envs - 1``; the workers get the rest, so at least one must remain): speed over
    isolation. 0 (the default): every env in a worker, so an env that crashes (a segfault in
    native code) or hangs is reported as an EnvWorkerError naming it; an env stepped in the
    calling process takes the caller down with it, and ``worker_timeout`` cannot stop it.
    A step sends the workers their commands, steps the local envs, then collects the replies:
    the parent works instead of waiting, and those envs pay no IPC. None (the speed split):
    with ``num_workers`` unset and ``C >= 2`` CPU cores, ``ceil((num_envs + 1) / C)`` local
    envs (at most ``num_envs - 1``) and ``C - 1`` workers: the parent takes one core's share,
    counting the workers' round trip per step as one more env (2 cores, 8 envs: 5 local, 3 in
    one worker); with ``num_workers`` set, ``restart_failed``, one core, or one env: 0. Envs
    much slower than a round trip (~0.1 ms) balance best at ``num_envs / C``.
    ``backend="auto"`` picks a share here when it measures that it pays, and says so."""
    worker_spin_us: float | None = field(
        default=None, validator=validators.optional(validators.ge(0))
    )
    """Microseconds an idle worker busy-polls its pipe (yielding the CPU between polls) for the
    next command before it blocks. Waking a blocked process costs tens of microseconds on a VM,
    more than a cheap env step; during stepping the next command arrives within a vector step.
    None (auto): 200 when there are fewer workers than CPU cores (each can keep one), else 0.
    0 always blocks (lowest CPU use; best on a machine shared with other busy processes)."""
    context: str | None = field(
        default=None, validator=validators.optional(validators.in_(CONTEXTS))
    )
    """multiprocessing start method: fork, spawn or forkserver. None: fork where the platform has
    it (fastest start), else spawn. Env factories travel with cloudpickle, so lambdas work."""
    wait_num: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Default for ``step_wait``: return once this many envs are ready (None: all in flight)."""
    timeout: float | None = field(default=None, validator=_positive_or_none)
    """Default for ``step_wait``: return what is ready after this many seconds (at least one
    env's result); None waits for ``wait_num``."""
    worker_timeout: float | None = field(default=120.0, validator=_positive_or_none)
    """Seconds a worker may take to answer one command (step, reset, render...) before it is
    declared hung, killed and reported as an EnvWorkerError naming the env that was running.
    A worker that dies is detected at once regardless. Envs stepped in the calling process
    (``local_envs``) are not covered. None or ``inf``: no limit (``inf`` also through
    ``auto``, where None means "not given")."""
    start_timeout: float | None = field(default=300.0, validator=_positive_or_none)
    """Seconds a worker may take to start and build its envs (process start, imports, env
    constructors: often far slower than a step) before it is declared hung and killed; the
    larger of this and ``worker_timeout`` applies. None waits as long as it takes."""
    restart_failed: bool = False
    """Restart a worker that died or hung and carry on: its envs' pending steps come back as
    truncated (``info["env_worker_restarted"]`` says why) and must be reset, like any finished
    env; each restart is reported as a RuntimeWarning naming the env, the cause and the count.
    False raises EnvWorkerError instead."""
    max_restarts: int = field(default=3, validator=validators.ge(0))
    """With ``restart_failed``: restarts allowed per worker over the life of the vector env;
    the next failure of that worker raises EnvWorkerError (an env that keeps crashing is a bug
    to fix, not noise to ride out)."""
