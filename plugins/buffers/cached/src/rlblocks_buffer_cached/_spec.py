"""Entry-point spec of the cached buffer: imports nothing heavier than attrs."""

from attrs import define, field, validators

from rlblocks.plugins.spec import BufferSpec


@define(kw_only=True)
class CachedConfig:
    """Options of the cached buffer (``size`` and ``num_envs`` are set by the run)."""

    cache_size: int = field(default=1000, validator=validators.ge(1))
    """Steps each env's cache holds: at least the longest episode (longer ones lose their
    oldest steps, with a warning)."""
    stack_num: int = field(default=1, validator=validators.ge(1))
    """Frames stacked along a new axis 1 when reading obs/obs_next/info/policy (1 = none)."""
    ignore_obs_next: bool = False
    """Do not store obs_next; rebuild it from the next transition's obs (saves memory)."""


SPEC = BufferSpec(
    name="cached",
    summary="Per-env caches; an episode enters the sampled buffer only once it has ended.",
    impl="rlblocks_buffer_cached.buffer:CachedReplayBuffer",
    config=CachedConfig,
)
