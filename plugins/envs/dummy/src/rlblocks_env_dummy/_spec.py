"""Entry-point spec of the dummy backend: imports nothing heavier than attrs."""

from attrs import define, field

from rlblocks.plugins import EnvBackendSpec


def _positive_or_none(_inst: object, attribute: object, value: float | None) -> None:
    if value is not None and not (isinstance(value, int | float) and value > 0):
        name = getattr(attribute, "name", "value")
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")


@define(kw_only=True)
class DummyConfig:
    """Options of the in-process backend."""

    worker_timeout: float | None = field(default=120.0, validator=_positive_or_none)
    """Seconds one env may take in ``step`` or ``reset`` before it is declared hung: the call
    then raises an EnvWorkerError naming the env (within about a second more). The env runs in
    this process, so it is interrupted, not killed: an env stuck in native code that does not
    return ends the process, with the Python stack of every thread on stderr. None or ``inf``:
    no limit (to step through an env in a debugger). A backend with worker processes
    (``subproc``, ``shmem``) isolates an env that hangs or crashes."""


SPEC = EnvBackendSpec(
    name="dummy",
    summary="Steps every env in a loop in the calling process (best for cheap envs).",
    impl="rlblocks_env_dummy.dummy:DummyVectorEnv",
    config=DummyConfig,
    supports_async=False,
    multiprocess=False,
)
