"""TensorBoard logger: scalars land as namespace/key events against env steps."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rlblocks
from rlblocks.plugins import get_registry, make_plugin_manager


def test_logger_is_registered_by_name() -> None:
    spec = get_registry("logger").spec("tensorboard")
    assert spec.load().__name__ == "TensorboardLogger"
    assert rlblocks.__version__


def test_scalars_are_written_per_namespace(tmp_path: Path) -> None:
    cls = get_registry("logger").load("tensorboard")
    logger = cls(tmp_path)
    pm = make_plugin_manager([logger])
    pm.hook.rlblocks_configure.call_historic(kwargs={"config": {"a": 1}, "run_dir": tmp_path})
    for step, value in [(10, 1.0), (20, 2.0), (30, 4.0)]:
        pm.hook.rlblocks_log(namespace="test", scalars={"return_mean": value}, step=step)
    pm.hook.rlblocks_run_end(result={}, run_dir=tmp_path)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    events = acc.Scalars("test/return_mean")
    assert [(e.step, e.value) for e in events] == [(10, 1.0), (20, 2.0), (30, 4.0)]


def test_the_summary_line_quotes_its_folder_for_the_shell(tmp_path: Path) -> None:
    import shlex

    logs = tmp_path / "my runs" / "logs"
    logger = get_registry("logger").load("tensorboard")(logs, None)
    try:
        where = logger.where()
    finally:
        logger.rlblocks_run_end(result={}, run_dir=None)
    command = where.split("(watch it: ")[1].rstrip(")")
    assert shlex.split(command) == ["tensorboard", "--logdir", str(logs)]
