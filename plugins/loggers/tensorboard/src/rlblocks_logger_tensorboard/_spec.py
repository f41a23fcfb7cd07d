"""Entry-point spec of the TensorBoard logger: imports nothing heavier than attrs."""

from attrs import define, field, validators

from rlblocks.plugins import LoggerSpec


@define(kw_only=True)
class TensorboardConfig:
    """Options of the TensorBoard logger."""

    flush_secs: float = field(default=10.0, validator=validators.gt(0))
    """Seconds between flushes of pending events to disk."""


SPEC = LoggerSpec(
    name="tensorboard",
    summary="TensorBoard event files of every logged scalar.",
    impl="rlblocks_logger_tensorboard.logger:TensorboardLogger",
    config=TensorboardConfig,
)
