"""CSV logger: one file per namespace, header widening, JSON lines, resumed runs append."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rlblocks.plugins.manager import make_plugin_manager
from rlblocks_logger_csv._spec import CsvConfig
from rlblocks_logger_csv.logger import CsvLogger


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_one_file_per_namespace_with_step_column(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path)
    pm = make_plugin_manager([logger])
    pm.hook.rlblocks_log(namespace="train", scalars={"return_mean": 10.0}, step=8)
    pm.hook.rlblocks_log(namespace="test", scalars={"return_mean": 20.0}, step=16)
    pm.hook.rlblocks_log(namespace="train", scalars={"return_mean": 12.5}, step=24)
    logger.close()
    assert rows(tmp_path / "train.csv") == [
        {"step": "8", "return_mean": "10.0"},
        {"step": "24", "return_mean": "12.5"},
    ]
    assert rows(tmp_path / "test.csv") == [{"step": "16", "return_mean": "20.0"}]


def test_new_key_widens_the_header_and_keeps_old_rows(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path)
    logger.rlblocks_log(namespace="update", scalars={"loss": 1.0}, step=1)
    logger.rlblocks_log(namespace="update", scalars={"loss": 0.5, "q": 3.0}, step=2)
    logger.close()
    assert rows(tmp_path / "update.csv") == [
        {"step": "1", "loss": "1.0", "q": ""},
        {"step": "2", "loss": "0.5", "q": "3.0"},
    ]


def test_jsonl_records_every_call_and_nan_becomes_null(tmp_path: Path) -> None:
    logger = CsvLogger(tmp_path, CsvConfig(jsonl=True))
    logger.rlblocks_log(namespace="test", scalars={"return_mean": float("nan")}, step=5)
    logger.close()
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line) == {"namespace": "test", "step": 5, "return_mean": None}


def test_a_resumed_run_appends_under_the_existing_header(tmp_path: Path) -> None:
    first = CsvLogger(tmp_path)
    first.rlblocks_log(namespace="train", scalars={"a": 1.0, "b": 2.0}, step=1)
    first.close()
    second = CsvLogger(tmp_path)
    second.rlblocks_log(namespace="train", scalars={"b": 4.0, "a": 3.0}, step=2)
    second.close()
    assert rows(tmp_path / "train.csv") == [
        {"step": "1", "a": "1.0", "b": "2.0"},
        {"step": "2", "a": "3.0", "b": "4.0"},
    ]
