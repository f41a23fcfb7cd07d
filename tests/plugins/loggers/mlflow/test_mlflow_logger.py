"""MLflow logger: a run's file store holds every scalar as a metric against env steps, the config
as params, and a status that says whether the run finished or failed."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import rlblocks
from rlblocks.contracts import PluginLoadError
from rlblocks.plugins import get_registry
from rlblocks.testing import CrashAt
from rlblocks_logger_mlflow._spec import MlflowConfig
from rlblocks_logger_mlflow.logger import MlflowLogger, flatten_params, metric_key

SHORT_RUN = [
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "trainer.checkpoint_interval=200",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


@pytest.fixture(autouse=True)
def local_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tracking server or experiment from the environment; file stores allowed for reading."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def only_run(uri: str) -> tuple[MlflowClient, object]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("rlblocks")
    assert experiment is not None, f"no 'rlblocks' experiment in {uri}"
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def test_logger_is_registered_by_name_without_importing_mlflow() -> None:
    spec = get_registry("logger").spec("mlflow")
    assert spec.config is MlflowConfig
    assert spec.impl == "rlblocks_logger_mlflow.logger:MlflowLogger"


def test_a_short_run_logs_metrics_with_env_steps_and_params(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = rlblocks.train(
        "dqn",
        env="CartPole-v1",
        seed=0,
        max_env_steps=600,
        overrides=SHORT_RUN,
        loggers=["mlflow"],
        run_dir=run_dir,
        progress=False,
    )
    client, run = only_run((run_dir / "logs" / "mlruns").as_uri())
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "run"
    history = client.get_metric_history(run.info.run_id, "test/return_mean")
    assert [m.step for m in history] == [200, 400, 600]
    assert all(m.value > 0 for m in history)
    assert history[-1].value == pytest.approx(result.last_test_return)
    updates = client.get_metric_history(run.info.run_id, "update/gradient_step")
    assert updates and updates[-1].value == result.gradient_steps
    lr = client.get_metric_history(run.info.run_id, "update/lr/q")
    assert lr and {m.step for m in lr} == {m.step for m in updates}
    assert client.get_metric_history(run.info.run_id, "update/epsilon")
    params = run.data.params
    assert params["trainer.max_env_steps"] == "600"
    assert params["env.id"] == "CartPole-v1"
    assert float(params["algo.lr"]) == pytest.approx(lr[0].value)


def test_a_run_that_raises_ends_failed_and_resume_continues_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        rlblocks.train(
            "dqn",
            env="CartPole-v1",
            max_env_steps=600,
            overrides=SHORT_RUN,
            loggers=["mlflow"],
            run_dir=run_dir,
            progress=False,
            hooks=[CrashAt(450)],
        )
    uri = (run_dir / "logs" / "mlruns").as_uri()
    client, run = only_run(uri)
    assert run.info.status == "FAILED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "test/return_mean")]
    assert steps == [200, 400]
    # the resumed run (saved config, so the mlflow logger again) reopens the same MLflow run
    rlblocks.resume(run_dir, overrides=["trainer.max_env_steps=800"])
    client, resumed = only_run(uri)
    assert resumed.info.run_id == run.info.run_id
    assert resumed.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "test/return_mean")]
    assert steps[-1] == 800
    assert resumed.data.params["trainer.max_env_steps"] == "600"  # params are never rewritten


def test_the_default_file_store_opens_without_the_opt_in_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # restored after the test, as the logger's is
    run_dir = tmp_path / "my-run"
    logger = MlflowLogger(run_dir / "logs")
    logger.rlblocks_run_start(config={"algo": {"lr": 0.5}}, run_dir=run_dir, resumed=False)
    logger.rlblocks_log(namespace="test", scalars={"return_mean": float("nan")}, step=5)
    logger.rlblocks_run_end(result={}, run_dir=run_dir)
    client, run = only_run((run_dir / "logs" / "mlruns").as_uri())
    assert run.info.run_name == "my-run" and run.data.params == {"algo.lr": "0.5"}
    (metric,) = client.get_metric_history(run.info.run_id, "test/return_mean")
    assert metric.step == 5 and math.isnan(metric.value)


def test_names_mlflow_refuses_are_sanitised_and_configs_flattened() -> None:
    assert metric_key("update", "lr/q") == "update/lr/q"
    assert metric_key("test", "return (mean)%") == "test/return _mean__"
    assert dict(flatten_params({"algo": {"lr": 0.001, "hidden": [64, 64]}, "name": "dqn"})) == {
        "algo.lr": "0.001",
        "algo.hidden": "[64, 64]",
        "name": "dqn",
    }


def test_a_missing_mlflow_is_one_line_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # `import mlflow.tracking` fails
    with pytest.raises(PluginLoadError, match=r"pip install mlflow-skinny") as info:
        MlflowLogger(tmp_path)
    assert "\n" not in str(info.value)
