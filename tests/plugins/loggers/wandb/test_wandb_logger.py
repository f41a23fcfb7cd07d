"""W&B logger: an offline run records every scalar against env steps, the resolved config, the
result, and whether the run finished or failed."""

from __future__ import annotations

import json
import struct
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from wandb.proto import wandb_internal_pb2

import rlblocks
from rlblocks.contracts import PluginLoadError
from rlblocks.plugins import get_registry
from rlblocks.testing import CrashAt
from rlblocks_logger_wandb._spec import WandbConfig
from rlblocks_logger_wandb.logger import WandbLogger, resolve_mode

SHORT_RUN = [
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "trainer.checkpoint_interval=200",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B offline and quiet, with everything it writes under tmp_path and no user settings."""
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_NAME", "WANDB_ENTITY", "WANDB_TAGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


# -- reading an offline run back ----------------------------------------------------------------

_BLOCK = 32 * 1024
_HEADER = 7  # per chunk: CRC32C (4 bytes), length (2), type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_records(path: Path) -> list[Any]:
    """The records of a W&B ``.wandb`` file: a 7-byte file header (``:W&B``, magic, version),
    then a LevelDB-style log in 32 KiB blocks, each record a serialized ``Record`` split into
    chunks that never cross a block (a block tail shorter than a chunk header is padding)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is no W&B transaction log"
    records: list[Any] = []
    pending = b""
    pos = 7
    while pos + _HEADER <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _HEADER:
            pos += left_in_block
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        if pos + _HEADER + length > len(data):  # the writer is still at it
            break
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        assert kind in (_FULL, _FIRST, _MIDDLE, _LAST), f"bad chunk type {kind} in {path}"
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            records.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return records


def offline_run(log_dir: Path, timeout: float = 30.0) -> dict[str, Any]:
    """History (key -> [(step, value)]), config, summary and exit code of the one offline run
    under ``log_dir``.

    ``finish()`` returns before W&B's writer process has flushed the file, so this waits (up to
    ``timeout`` seconds) for the run's exit record; a run that was never finished has none."""
    (run_file,) = log_dir.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + timeout
    records = read_records(run_file)
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        if time.monotonic() > deadline:
            pytest.fail(f"{run_file} has no exit record after {timeout} s: the run never finished")
        time.sleep(0.1)
        records = read_records(run_file)
    history: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    exit_code = None
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                history[key].append((record.history.step.num, json.loads(item.value_json)))
        elif kind in ("run", "config"):  # init's config rides in the run record
            updates = record.run.config.update if kind == "run" else record.config.update
            for item in updates:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "exit":
            exit_code = record.exit.exit_code
    return {"history": history, "config": config, "summary": summary, "exit_code": exit_code}


# -- tests --------------------------------------------------------------------------------------


def test_logger_is_registered_by_name_without_importing_wandb() -> None:
    spec = get_registry("logger").spec("wandb")
    assert spec.config is WandbConfig
    assert spec.impl == "rlblocks_logger_wandb.logger:WandbLogger"


def test_a_short_run_logs_test_returns_config_and_finishes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = rlblocks.train(
        "dqn",
        env="CartPole-v1",
        seed=0,
        max_env_steps=600,
        overrides=SHORT_RUN,
        loggers=["wandb"],
        run_dir=run,
        progress=False,
    )
    logged = offline_run(run / "logs")
    history = logged["history"]
    assert [step for step, _ in history["test/return_mean"]] == [200, 400, 600]
    assert all(value > 0 for _, value in history["test/return_mean"])
    assert history["train/n_step"] and history["update/loss"]
    steps = [step for key in history for step, _ in history[key]]
    assert max(steps) == result.env_steps
    config = logged["config"]
    # the schedules ride along with the update statistics
    lr = config["algo"]["lr"]
    assert history["update/lr/q"] and all(v == pytest.approx(lr) for _, v in history["update/lr/q"])
    assert 0.0 < history["update/epsilon"][-1][1] < 1.0
    assert config["algo_name"] == "dqn"
    assert config["trainer"]["max_env_steps"] == 600
    assert logged["summary"]["result/env_steps"] == result.env_steps
    assert logged["exit_code"] == 0


def test_a_run_that_raises_is_finished_as_failed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        rlblocks.train(
            "dqn",
            env="CartPole-v1",
            max_env_steps=600,
            overrides=SHORT_RUN,
            loggers=["wandb"],
            run_dir=run,
            progress=False,
            hooks=[CrashAt(250)],
        )
    logged = offline_run(run / "logs")
    assert [step for step, _ in logged["history"]["test/return_mean"]] == [200]
    assert logged["exit_code"] == 1


def test_run_name_defaults_to_the_run_directory(tmp_path: Path) -> None:
    logger = WandbLogger(tmp_path / "my-run" / "logs")
    logger.rlblocks_run_start(config={"a": 1}, run_dir=tmp_path / "my-run", resumed=False)
    try:
        assert logger.run is not None
        assert logger.run.name == "my-run"
        assert logger.run.project == "rlblocks"
    finally:
        logger.finish()
    assert logger.run is None
    # the run's summary line: an offline run's folder and the command that uploads it
    where = logger.where()
    assert where is not None and "project 'rlblocks' (upload it: wandb sync " in where
    folder = where.split("wandb sync ")[1].rstrip(")")
    assert Path(folder).is_dir() and Path(folder).name.startswith("offline-run-"), where


def test_mode_is_offline_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE")
    assert resolve_mode(WandbConfig()) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode(WandbConfig()) == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode(WandbConfig()) == "disabled"
    assert resolve_mode(WandbConfig(mode="offline")) == "offline"


def test_a_missing_wandb_is_one_line_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with pytest.raises(PluginLoadError, match=r"pip install wandb") as info:
        WandbLogger(tmp_path)
    assert "\n" not in str(info.value)
