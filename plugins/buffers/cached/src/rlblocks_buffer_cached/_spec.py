"""Entry-point spec of the cached buffer: imports nothing heavier than attrs."""

from attrs import define, field, validators

from rlblocks.plugins import BufferSpec


@define(kw_only=True)
class CachedConfig:
    """Options of the cached writer."""

    cache_size: int = field(default=1000, validator=validators.ge(1))
    """Steps each env's cache holds: at least the longest episode (longer ones lose their
    oldest steps, with a warning)."""


SPEC = BufferSpec(
    name="cached",
    summary="Writer: per-env caches; an episode enters the buffer only once it has ended.",
    impl="rlblocks_buffer_cached.buffer:CachedWriter",
    config=CachedConfig,
    part="writer",
)
