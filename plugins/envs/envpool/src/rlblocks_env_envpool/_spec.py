"""Entry-point spec of the EnvPool backend: imports nothing heavier than attrs."""

from rlblocks.plugins import EnvBackendSpec
from rlblocks_env_envpool.config import EnvPoolConfig

SPEC = EnvBackendSpec(
    name="envpool",
    summary="EnvPool's C++ thread pool for the env ids it implements (classic control, MuJoCo).",
    impl="rlblocks_env_envpool.envpool_env:EnvPoolVectorEnv",
    config=EnvPoolConfig,
    supports_async=False,
    multiprocess=False,
    provides="rlblocks_env_envpool.envpool_env:provides",
)
