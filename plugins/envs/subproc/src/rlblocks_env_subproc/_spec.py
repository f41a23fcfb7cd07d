"""Entry-point spec of the subproc backend: imports nothing heavier than attrs."""

from rlblocks.plugins import EnvBackendSpec
from rlblocks_env_subproc.config import SubprocConfig

SPEC = EnvBackendSpec(
    name="subproc",
    summary="Worker processes over pipes, several envs per worker (for envs costlier than IPC).",
    impl="rlblocks_env_subproc.subproc:SubprocVectorEnv",
    config=SubprocConfig,
    supports_async=True,
    multiprocess=True,
)
