"""Entry-point spec of the dummy backend: imports nothing heavier than attrs."""

from rlblocks.plugins import EnvBackendSpec

SPEC = EnvBackendSpec(
    name="dummy",
    summary="Steps every env in a loop in the calling process (best for cheap envs).",
    impl="rlblocks_env_dummy.dummy:DummyVectorEnv",
    supports_async=False,
    multiprocess=False,
)
