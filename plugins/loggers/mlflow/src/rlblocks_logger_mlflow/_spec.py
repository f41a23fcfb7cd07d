"""Entry-point spec of the MLflow logger: imports nothing heavier than attrs (not mlflow)."""

from attrs import define

from rlblocks.plugins import LoggerSpec


@define(kw_only=True)
class MlflowConfig:
    """Options of the MLflow logger. A field left as None falls back to MLflow's own environment
    variable (named in its docstring), then to the default given there."""

    tracking_uri: str | None = None
    """Where runs are tracked (a server URL, ``sqlite:///...``, ``file:...``); None:
    ``$MLFLOW_TRACKING_URI``, else a file store in the run, ``file:<run_dir>/logs/mlruns``."""
    experiment_name: str | None = None
    """MLflow experiment the run belongs to, created when missing; None:
    ``$MLFLOW_EXPERIMENT_NAME``, else ``"rlblocks"``."""
    run_name: str | None = None
    """MLflow run name; None: the run directory's name."""


SPEC = LoggerSpec(
    name="mlflow",
    summary="MLflow tracking: every scalar as a metric against env steps, the config as params.",
    impl="rlblocks_logger_mlflow.logger:MlflowLogger",
    config=MlflowConfig,
    endpoint_fields=("tracking_uri",),
)
