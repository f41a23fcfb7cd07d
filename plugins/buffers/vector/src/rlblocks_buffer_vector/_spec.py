"""Entry-point spec of the vector buffer: imports nothing heavier than attrs."""

from rlblocks._spec import ReplayConfig
from rlblocks.plugins.spec import BufferSpec

SPEC = BufferSpec(
    name="vector",
    summary="One circular sub-buffer per env in one storage (each keeps size // num_envs steps).",
    impl="rlblocks_buffer_vector.buffer:VectorReplayBuffer",
    config=ReplayConfig,
)
