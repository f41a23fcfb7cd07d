"""Entry-point spec and options of the Ray backend: imports nothing heavier than attrs."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.plugins import EnvBackendSpec


def _positive_or_none(_inst: object, attribute: Any, value: float | None) -> None:
    if value is not None and not value > 0:  # NaN is refused too
        raise ValueError(f"{attribute.name} must be positive or None, got {value!r}")


@define(kw_only=True)
class RayConfig:
    """Options of the Ray backend."""

    address: str | None = None
    """Ray cluster to run the env actors on. None: the Ray this process is already connected
    to, else the local Ray that ``ray start`` runs on this machine (or ``RAY_ADDRESS``), else a
    private local Ray started for this vector env (all cores, no dashboard) and shut down when
    the last vector env using it closes. A string (``"ray://head:10001"``, ``"10.0.0.5:6379"``,
    ``"auto"``): connect to that cluster, which this backend never shuts down."""
    num_workers: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Env actors; each steps ``num_envs / num_workers`` envs per call. None: one per CPU of
    the cluster, at most one per env."""
    wait_num: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Default for ``step_wait``: return once this many envs are ready (None: all in flight)."""
    timeout: float | None = field(default=None, validator=_positive_or_none)
    """Default for ``step_wait``: return what is ready after this many seconds (at least one
    env's result); None waits for ``wait_num``."""
    worker_timeout: float | None = field(default=120.0, validator=_positive_or_none)
    """Seconds an actor may take to answer one call (step, reset...) before it is declared
    hung, killed and reported. An actor that dies is detected at once regardless."""
    start_timeout: float | None = field(default=300.0, validator=_positive_or_none)
    """Seconds an actor may take to start and build its envs (Ray may have to start worker
    processes, or wait for a node with the resources in ``actor_options``)."""
    restart_failed: bool = False
    """Start a new actor in place of one that died or hung and carry on: its envs' pending
    steps come back truncated (``info["env_worker_restarted"]`` says why) and must be reset,
    like any finished env; each restart is reported as a RuntimeWarning naming the actor's
    envs, the cause and the count. False raises EnvWorkerError instead."""
    max_restarts: int = field(default=3, validator=validators.ge(0))
    """With ``restart_failed``: new actors allowed per worker over the life of the vector env;
    the next failure of that worker raises EnvWorkerError. (Ray's own actor restarts stay off:
    a restarted actor would come back with fresh envs the caller does not know about.)"""
    init_kwargs: dict[str, Any] = field(factory=dict)
    """Extra keyword arguments of ``ray.init`` (``num_cpus``, ``runtime_env``, ``namespace``...)
    when this backend connects to or starts Ray; ignored when Ray is already initialised."""
    actor_options: dict[str, Any] = field(factory=dict)
    """Keyword arguments of each actor's ``.options()`` (``num_cpus``, ``resources``,
    ``scheduling_strategy``...), e.g. to place env actors on particular nodes. Detached
    actors are refused: env actors die with the process that made them."""


SPEC = EnvBackendSpec(
    name="ray",
    summary="Env workers as Ray actors, several envs each; local or on a Ray cluster.",
    impl="rlblocks_env_ray.ray_env:RayVectorEnv",
    config=RayConfig,
    endpoint_fields=("address", "init_kwargs"),
    supports_async=True,
    multiprocess=True,
)
