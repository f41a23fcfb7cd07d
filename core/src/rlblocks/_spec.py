"""Specs of core's own built-in components, registered through entry points
like any plugin's."""

from attrs import define, field, validators

from rlblocks.plugins.spec import BufferSpec, EnvBackendSpec


@define(kw_only=True)
class ReplayConfig:
    """Options of the base replay buffer (``size`` and ``num_envs`` are set by the run)."""

    stack_num: int = field(default=1, validator=validators.ge(1))
    """Frames stacked along a new axis 1 when reading obs/obs_next/info/policy (1 = none)."""
    ignore_obs_next: bool = False
    """Do not store obs_next; rebuild it from the next transition's obs (saves memory)."""
    storage: str = field(default="memory", validator=validators.in_(("memory", "memmap")))
    """Where the arrays live: "memory" (RAM) or "memmap" (.npy files under path, may exceed RAM;
    flush() makes them durable and the same path reopens them)."""
    path: str | None = None
    """Directory of the memory-mapped files (storage="memmap" only)."""


REPLAY = BufferSpec(
    name="replay",
    summary="Circular replay buffer with episode links, frame stacking and hdf5 files.",
    impl="rlblocks.buffer:ReplayBuffer",
    config=ReplayConfig,
)


@define(kw_only=True)
class AutoBackendConfig:
    """Options of ``backend="auto"``."""

    probe_seconds: float = field(default=0.2, validator=validators.gt(0))
    """Seconds spent stepping one env in this process to measure its step cost."""
    verbose: bool = True
    """Print which backend was chosen and why (it is also kept in ``envs.auto_choice``)."""


AUTO = EnvBackendSpec(
    name="auto",
    summary="Measures the env's step cost and picks the in-process or a multi-process backend.",
    impl="rlblocks.auto_backend:make_auto_vector_env",
    config=AutoBackendConfig,
)
