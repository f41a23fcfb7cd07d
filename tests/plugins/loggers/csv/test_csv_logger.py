"""CSV logger: one file per namespace, header widening, JSON lines, resumed runs append, counts
written as integers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np

import rlblocks
from rlblocks.plugins import make_plugin_manager
from rlblocks_logger_csv._spec import CsvConfig
from rlblocks_logger_csv.logger import CsvLogger


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_one_file_per_namespace_with_step_column(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path)
    pm = make_plugin_manager([logger])
    pm.hook.rlblocks_log(namespace="train", scalars={"return_mean": 10.5}, step=8)
    pm.hook.rlblocks_log(namespace="test", scalars={"return_mean": 20.25}, step=16)
    pm.hook.rlblocks_log(namespace="train", scalars={"return_mean": 12.5}, step=24)
    logger.close()
    assert rows(tmp_path / "train.csv") == [
        {"step": "8", "return_mean": "10.5"},
        {"step": "24", "return_mean": "12.5"},
    ]
    assert rows(tmp_path / "test.csv") == [{"step": "16", "return_mean": "20.25"}]


def test_new_key_widens_the_header_and_keeps_old_rows(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path)
    logger.rlblocks_log(namespace="update", scalars={"loss": 1.5}, step=1)
    logger.rlblocks_log(namespace="update", scalars={"loss": 0.5, "q": 3.25}, step=2)
    logger.close()
    assert rows(tmp_path / "update.csv") == [
        {"step": "1", "loss": "1.5", "q": ""},
        {"step": "2", "loss": "0.5", "q": "3.25"},
    ]


def test_jsonl_records_every_call_and_nan_becomes_null(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path, CsvConfig(jsonl=True))
    logger.rlblocks_log(namespace="test", scalars={"return_mean": float("nan")}, step=5)
    logger.close()
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line) == {"namespace": "test", "step": 5, "return_mean": None}


def test_a_resumed_run_appends_under_the_existing_header(tmp_path: Path) -> None:
    first = CsvLogger(tmp_path)
    first.rlblocks_log(namespace="train", scalars={"a": 1.5, "b": 2.5}, step=1)
    first.close()
    second = CsvLogger(tmp_path)
    second.rlblocks_log(namespace="train", scalars={"b": 4.5, "a": 3.5}, step=2)
    second.close()
    assert rows(tmp_path / "train.csv") == [
        {"step": "1", "a": "1.5", "b": "2.5"},
        {"step": "2", "a": "3.5", "b": "4.5"},
    ]


def test_counts_are_written_as_integers_and_measurements_as_floats(tmp_path: Path) -> None:
    # counts arrive as ints (Python or numpy); a measurement that happens to be whole stays float
    logger = CsvLogger(tmp_path, CsvConfig(jsonl=True))
    scalars = {
        "n_step": 8,
        "n_episode": np.int64(2),
        "gradient_step": 123,
        "length_mean": np.float32(21.0),
        "return_mean": 21.5,
    }
    logger.rlblocks_log(namespace="train", scalars=scalars, step=40)
    logger.close()
    assert rows(tmp_path / "train.csv") == [
        {
            "step": "40",
            "n_step": "8",
            "n_episode": "2",
            "gradient_step": "123",
            "length_mean": "21.0",
            "return_mean": "21.5",
        }
    ]
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert [type(record[k]) for k in ("step", "n_step", "n_episode", "gradient_step")] == [int] * 4
    assert record["return_mean"] == 21.5


def test_a_short_dqn_run_writes_counts_as_integers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rlblocks.train(
        "dqn",
        env="CartPole-v1",
        seed=0,
        overrides=[
            "trainer.max_env_steps=400",
            "trainer.warmup_steps=64",
            "trainer.test_interval=200",
            "trainer.test_episodes=2",
            "trainer.test_screen_episodes=0",
            "env.num_envs=2",
            "env.num_test_envs=2",
        ],
        run_dir=run,
        progress=False,
        loggers=["csv"],
    )
    logs = run / "logs"
    counts = {
        "train": ["step", "n_step", "n_episode"],
        "update": ["step", "gradient_step"],
        "test": ["step", "n_step", "n_episode"],
    }
    for namespace, columns in counts.items():
        table = rows(logs / f"{namespace}.csv")
        assert table, f"{namespace}.csv has no rows"
        for row in table:
            for column in columns:
                assert re.fullmatch(r"-?[0-9]+", row[column]), (namespace, column, row[column])
