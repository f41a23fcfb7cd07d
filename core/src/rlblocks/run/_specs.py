"""Spec of core's own ``auto`` env backend, registered through an entry point like any
plugin's."""

from attrs import define, field, validators

from rlblocks.plugins import EnvBackendSpec


@define(kw_only=True)
class AutoBackendConfig:
    """Options of ``backend="auto"``."""

    probe_seconds: float = field(default=0.2, validator=validators.gt(0))
    """Seconds spent stepping one env in this process to measure its step cost."""
    verbose: bool = True
    """Print which backend was chosen and why (it is also kept in ``envs.auto_choice``)."""
    asynchronous: bool = False
    """Choose only among backends that step envs asynchronously (``step_async`` /
    ``step_wait``); ``trainer.async_collect`` sets it for the training envs."""
    # -- passed on to the chosen backend (None: not given, the backend's own default) ----------
    # Giving one limits the choice to backends that take it (the multi-process ones); see
    # rlblocks.auto_backend.FORWARDED.
    num_workers: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Worker processes (subproc/shmem); given, every env steps in a worker."""
    local_envs: int | None = field(default=None, validator=validators.optional(validators.ge(0)))
    """Envs stepped in the calling process (subproc/shmem); None: auto decides."""
    context: str | None = None
    """multiprocessing start method of the workers (subproc/shmem)."""
    worker_timeout: float | None = field(
        default=None, validator=validators.optional(validators.gt(0))
    )
    """Seconds a worker may take to answer a command (subproc/shmem; their default: 120)."""
    start_timeout: float | None = field(
        default=None, validator=validators.optional(validators.gt(0))
    )
    """Seconds a worker may take to build its envs (subproc/shmem; their default: 300)."""
    restart_failed: bool | None = None
    """Restart a worker that died or hung (subproc/shmem); True keeps every env in a worker."""
    max_restarts: int | None = field(
        default=None, validator=validators.optional(validators.ge(0))
    )
    """Restarts allowed per worker with ``restart_failed`` (subproc/shmem; their default: 3)."""
    worker_spin_us: float | None = field(
        default=None, validator=validators.optional(validators.ge(0))
    )
    """Microseconds an idle worker busy-polls for the next command (subproc/shmem)."""


AUTO = EnvBackendSpec(
    name="auto",
    summary="Measures the env's step cost and picks the in-process or a multi-process backend.",
    impl="rlblocks.run:make_auto_vector_env",
    config=AutoBackendConfig,
)
