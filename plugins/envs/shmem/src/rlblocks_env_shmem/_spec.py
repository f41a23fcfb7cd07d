"""Entry-point spec of the shmem backend: imports nothing heavier than attrs."""

from rlblocks.plugins import EnvBackendSpec
from rlblocks_env_subproc.config import SubprocConfig

SPEC = EnvBackendSpec(
    name="shmem",
    summary="Worker processes, several envs each; obs, rewards, flags, actions in shared memory.",
    impl="rlblocks_env_shmem.shmem:ShmemVectorEnv",
    config=SubprocConfig,
    supports_async=True,
    multiprocess=True,
)
