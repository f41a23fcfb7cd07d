"""Entry-point spec of the W&B logger: imports nothing heavier than attrs (not wandb)."""

from attrs import define, field, validators

from rlblocks.plugins import LoggerSpec

MODES = ("online", "offline", "disabled")


@define(kw_only=True)
class WandbConfig:
    """Options of the W&B logger. A field left as None falls back to W&B's own environment
    variable (named in its docstring), then to the default given there."""

    project: str | None = None
    """W&B project; None: ``$WANDB_PROJECT``, else ``"rlblocks"``."""
    entity: str | None = None
    """User or team that owns the project; None: ``$WANDB_ENTITY``, else your default entity."""
    mode: str | None = field(default=None, validator=validators.optional(validators.in_(MODES)))
    """``"online"``, ``"offline"`` (written to disk only; upload later with ``wandb sync``) or
    ``"disabled"``; None: ``$WANDB_MODE``, else ``"online"`` when ``$WANDB_API_KEY`` is set and
    ``"offline"`` when it is not, so a run never waits on a login prompt."""
    group: str | None = None
    """Run group (the seeds of one experiment); None: ``$WANDB_RUN_GROUP``, else no group."""
    tags: list[str] = field(factory=list)
    """Run tags; empty: ``$WANDB_TAGS`` (comma-separated), else none."""
    name: str | None = None
    """Run display name; None: ``$WANDB_NAME``, else the run directory's name."""
    dir: str | None = None
    """Where W&B writes its files (a ``wandb/`` folder inside); None: the run's logs directory."""


SPEC = LoggerSpec(
    name="wandb",
    summary="Weights & Biases runs: every scalar against env steps, the resolved config.",
    impl="rlblocks_logger_wandb.logger:WandbLogger",
    config=WandbConfig,
    path_fields=("dir",),
    endpoint_fields=("mode", "entity", "project"),
)
