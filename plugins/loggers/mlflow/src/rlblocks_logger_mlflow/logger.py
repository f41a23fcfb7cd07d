"""MLflow logger: one MLflow run per rlblocks run, every scalar as a metric against env steps.

The MLflow run is created at ``rlblocks_run_start`` with the resolved run config as params
(flattened: ``algo.lr``, ``trainer.batch_size``) and ended at ``rlblocks_run_end`` (FINISHED) or
``rlblocks_exception`` (FAILED; KILLED for a ``KeyboardInterrupt``). Its id is saved in
checkpoints, so a resumed rlblocks run continues the same MLflow run. It talks to the tracking
store through :class:`mlflow.tracking.MlflowClient` only, never MLflow's global active run, so
several rlblocks runs in one process never mix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlblocks.contracts import PluginLoadError
from rlblocks.plugins import hookimpl
from rlblocks_logger_mlflow._spec import MlflowConfig

__all__ = ["MlflowConfig", "MlflowLogger", "flatten_params", "metric_key"]

DEFAULT_EXPERIMENT = "rlblocks"
#: the key of this logger's entry in a checkpoint's plugin state
CHECKPOINT_KEY = "mlflow"
#: MLflow takes at most this many params in one batch call
_PARAMS_PER_BATCH = 100
# MLflow accepts letters, digits, ``_ - . /`` and spaces in metric and param names
_BAD_NAME_CHARS = re.compile(r"[^\w\-. /]")


def _import_mlflow() -> Any:
    # imported here, not at module level: building this logger is the only thing that needs it
    try:
        import mlflow.entities
        import mlflow.exceptions
        import mlflow.tracking
    except ImportError as exc:
        raise PluginLoadError(
            "the mlflow logger needs MLflow's tracking client, which is not installed: "
            "pip install mlflow-skinny"
        ) from exc
    return mlflow


def metric_key(namespace: str, key: str) -> str:
    """``namespace/key`` with characters MLflow refuses in names replaced by ``_``."""
    return _BAD_NAME_CHARS.sub("_", f"{namespace}/{key}")


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted.key, value as text)`` for every leaf of a nested config; lists stay whole."""
    for key, value in config.items():
        name = _BAD_NAME_CHARS.sub("_", f"{prefix}{key}")
        if isinstance(value, Mapping) and value:
            yield from flatten_params(value, prefix=f"{name}.")
        else:
            yield name, value if isinstance(value, str) else repr(value)


class MlflowLogger:
    """Logs a run to an MLflow tracking store; built by the run with the run's logs directory."""

    def __init__(self, log_dir: str | Path, config: MlflowConfig | None = None) -> None:
        self.config = config or MlflowConfig()
        self.log_dir = Path(log_dir)
        self._mlflow = _import_mlflow()
        self.client: Any = None
        self.run_id: str | None = None
        self._resume_id: str | None = None
        self._where: str | None = None

    @property
    def tracking_uri(self) -> str:
        """The config's URI, else ``$MLFLOW_TRACKING_URI``, else a file store in the logs dir."""
        uri = self.config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        return uri or (self.log_dir / "mlruns").resolve().as_uri()

    def start(self, config: Mapping[str, Any] | None = None, run_dir: Path | None = None) -> None:
        """Create (or, when resuming, reopen) the MLflow run and record ``config`` as params."""
        uri = self.tracking_uri
        if uri.startswith("file:"):
            # MLflow 3 refuses file stores unless this opts in; one inside the run directory is
            # this logger's default (a user who sets the variable to false gets MLflow's error)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = self._mlflow.tracking.MlflowClient(tracking_uri=uri)
        if self._resume_id is not None:
            self.run_id = self._resume_id
            client.update_run(self.run_id, status="RUNNING")
            logged = client.get_run(self.run_id).data.params
        else:
            name = self.config.run_name or (run_dir or self.log_dir.parent).name
            run = client.create_run(self._experiment_id(), run_name=name)
            self.run_id = run.info.run_id
            logged = {}
        experiment = client.get_experiment(client.get_run(self.run_id).info.experiment_id)
        self._where = self._describe(experiment.name)
        if config:
            # a resumed run keeps the params it has: MLflow refuses to change a logged param
            params = [
                self._mlflow.entities.Param(k, v)
                for k, v in flatten_params(config)
                if k not in logged
            ]
            for i in range(0, len(params), _PARAMS_PER_BATCH):
                client.log_batch(self.run_id, params=params[i : i + _PARAMS_PER_BATCH])

    def where(self) -> str | None:
        """Where the data is, for the run's summary: the tracking store, the experiment and the
        run id (and the command that shows a file store); None before the run started."""
        return self._where

    def _describe(self, experiment: str) -> str:
        uri = self.tracking_uri
        where = f"run {self.run_id} of experiment {experiment!r} at {uri}"
        if uri.startswith("file:"):
            where += f" (browse it: mlflow ui --backend-store-uri {uri})"
        return where

    def _experiment_id(self) -> str:
        name = (
            self.config.experiment_name
            or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            or DEFAULT_EXPERIMENT
        )
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return str(experiment.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except self._mlflow.exceptions.MlflowException:
            # another run created it between the two calls (seeds started together)
            return str(self.client.get_experiment_by_name(name).experiment_id)

    def end(self, status: str = "FINISHED") -> None:
        """Mark the MLflow run ``FINISHED``, ``FAILED`` or ``KILLED``; safe to call twice."""
        run_id, self.run_id = self.run_id, None
        if run_id is not None:
            self.client.set_terminated(run_id, status=status)

    @hookimpl
    def rlblocks_checkpoint_load(self, checkpoint: Mapping[str, Any]) -> None:
        saved = checkpoint.get(CHECKPOINT_KEY, {})
        if saved.get("tracking_uri") == self.tracking_uri:
            self._resume_id = saved.get("run_id")

    @hookimpl
    def rlblocks_run_start(self, config: dict, run_dir: Path | None, resumed: bool) -> None:
        if self.run_id is None:
            self.start(config, run_dir)

    @hookimpl
    def rlblocks_log(self, namespace: str, scalars: Mapping[str, float], step: int) -> None:
        if self.run_id is None:
            self.start()
        timestamp = int(time.time() * 1000)
        metrics = [
            self._mlflow.entities.Metric(metric_key(namespace, k), float(v), timestamp, step)
            for k, v in scalars.items()
        ]
        self.client.log_batch(self.run_id, metrics=metrics)

    @hookimpl
    def rlblocks_checkpoint_save(self, checkpoint: dict) -> None:
        if self.run_id is not None:
            checkpoint[CHECKPOINT_KEY] = {"run_id": self.run_id, "tracking_uri": self.tracking_uri}

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        self.end("FINISHED")

    @hookimpl
    def rlblocks_exception(self, exc: BaseException, where: str) -> None:
        self.end("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
