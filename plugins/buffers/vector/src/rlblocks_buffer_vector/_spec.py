"""Entry-point spec of the per-env layout: imports nothing heavier than attrs."""

from rlblocks.plugins import BufferSpec

SPEC = BufferSpec(
    name="vector",
    summary="Layout: one circular sub-buffer per env in one storage (size // num_envs each).",
    impl="rlblocks_buffer_vector.buffer:PerEnvLayout",
    part="layout",
)
