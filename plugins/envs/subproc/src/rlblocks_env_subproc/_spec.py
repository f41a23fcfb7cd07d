"""Entry-point spec and options of the subproc backend: imports nothing heavier than attrs."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.plugins.spec import EnvBackendSpec

CONTEXTS = ("fork", "spawn", "forkserver")


def _positive_or_none(_inst: object, attribute: object, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive or None, got {value!r}")  # type: ignore[attr-defined]


@define(kw_only=True)
class SubprocConfig:
    """Options of the multi-process backends (subproc and shmem share them)."""

    num_workers: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Worker processes; each steps ``num_envs / num_workers`` envs per command. None: one per
    available CPU core, at most one per env."""
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
    """Seconds a worker may take to answer one command (make, step, reset...) before it is
    declared hung, killed and reported. A worker that dies is detected at once regardless."""
    restart_failed: bool = False
    """Restart a worker that died or hung and carry on: its envs' pending steps come back as
    truncated (``info["env_worker_restarted"]`` says why) and must be reset, like any finished
    env. False raises EnvWorkerError instead."""


SPEC = EnvBackendSpec(
    name="subproc",
    summary="Worker processes over pipes, several envs per worker (for envs costlier than IPC).",
    impl="rlblocks_env_subproc.subproc:SubprocVectorEnv",
    config=SubprocConfig,
    supports_async=True,
    multiprocess=True,
)
