"""Loggers a user adds to the defaults, the minimal install's fallback, the summary naming where
each logger's data went; and the noise a newcomer saw (SDL's line under ``eval --video``, the
plugin template among the installed algorithms)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.plugins import get_registry
from rlblocks.run import DEFAULT_LOGGERS, resolve_train_config
from rlblocks.run._agent import headless_sdl
from rlblocks.trainers import ConsoleReporter


@pytest.fixture
def without_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """This environment as a minimal install sees it: the tensorboard logger is not installed."""
    registry = get_registry("logger")
    names = [n for n in registry.names() if n != "tensorboard"]
    monkeypatch.setattr(registry, "names", lambda: names)


def _loggers(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    import json

    assert cli(["train", "dqn", *argv, "--dry-run"]) == 0
    return json.loads(capsys.readouterr().out)["run"]["loggers"]


# -- loggers ------------------------------------------------------------------------------------


def test_logger_flags_add_to_the_defaults_unless_told_not_to(capsys, tmp_path: Path) -> None:
    assert DEFAULT_LOGGERS == ("tensorboard", "csv")
    assert _loggers([], capsys) == ["tensorboard", "csv"]
    assert _loggers(["--logger", "mlflow"], capsys) == ["tensorboard", "csv", "mlflow"]
    # a default named again is not doubled
    assert _loggers(["--logger", "csv", "--logger", "wandb"], capsys) == [
        "tensorboard", "csv", "wandb",
    ]  # fmt: skip
    assert _loggers(["--logger", "mlflow", "--no-default-loggers"], capsys) == ["mlflow"]
    assert _loggers(["--no-default-loggers"], capsys) == []
    # a config file's loggers are the ones the flag adds to
    config = tmp_path / "my.toml"
    config.write_text('[run]\nloggers = ["csv"]\n')
    assert _loggers(["--config", str(config), "--logger", "mlflow"], capsys) == ["csv", "mlflow"]


def test_no_default_loggers_and_a_set_of_the_loggers_are_refused_together(capsys) -> None:
    argv = ["train", "dqn", "--no-default-loggers", "--set", "run.loggers=['csv']", "--dry-run"]
    assert cli(argv) == 2
    assert "pass --no-default-loggers or --set run.loggers=..., not both" in capsys.readouterr().err


def test_a_default_logger_that_is_not_installed_is_left_out_with_the_command(
    without_tensorboard,
) -> None:
    with pytest.warns(UserWarning, match="default logger tensorboard is not installed") as seen:
        config = resolve_train_config("dqn")
    assert config.run.loggers == ["csv"]
    assert "pip install ./plugins/loggers/tensorboard" in str(seen[0].message)
    # asked for by name, it stays: the run then fails on it with the registry's install hint
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asked = resolve_train_config("dqn", loggers=["tensorboard", "csv"])
    assert asked.run.loggers == ["tensorboard", "csv"]


def test_the_command_line_adds_to_the_installed_defaults(without_tensorboard, capsys) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _loggers(["--logger", "mlflow"], capsys) == ["csv", "mlflow"]


class _Where:
    def __init__(self, where: object) -> None:
        self._where = where

    def where(self) -> str | None:
        if isinstance(self._where, Exception):
            raise self._where
        return self._where  # type: ignore[return-value]


def test_the_summary_names_each_logger_and_where_its_data_went(tmp_path: Path) -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(1000, progress=False, stream=out)
    reporter.loggers = {
        "wandb": _Where("https://wandb.ai/me/rlblocks/runs/abc (project 'rlblocks')"),
        "quiet": object(),  # a logger that does not say
        "broken": _Where(RuntimeError("no")),
    }
    result = {"solved": True, "stop_reason": "x", "best_test_return": 1.0}
    reporter.rlblocks_run_end(result=result, run_dir=tmp_path / "run")
    text = out.getvalue()
    assert "  logger wandb: https://wandb.ai/me/rlblocks/runs/abc (project 'rlblocks')" in text
    assert f"  logger quiet: its files, if any, are in {tmp_path / 'run' / 'logs'}" in text
    assert "  logger broken: (its where() failed: RuntimeError)" in text


def test_a_run_summary_says_where_tensorboard_csv_and_mlflow_wrote(tmp_path: Path, capsys) -> None:
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    rc = cli(["train", "dqn", "--logger", "mlflow", "--max-env-steps", "1100", "--no-progress",
              "--run-dir", str(run), "--set", "trainer.warmup_steps=1000"])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    logs = run / "logs"
    assert f"  logger tensorboard: {logs} (watch it: tensorboard --logdir {logs})" in err
    assert f"  logger csv: {logs / '*.csv'} and metrics.jsonl" in err
    line = next(ln for ln in err.splitlines() if ln.startswith("  logger mlflow: "))
    assert "of experiment 'rlblocks' at file:" in line and "mlflow ui --backend-store-uri" in line
    assert list(logs.glob("events.out.tfevents.*")) and (logs / "metrics.jsonl").is_file()


# -- noise --------------------------------------------------------------------------------------


def test_headless_sdl_sets_only_what_the_user_left_unset(monkeypatch) -> None:
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    monkeypatch.setenv("SDL_AUDIODRIVER", "pulseaudio")
    restore = headless_sdl()
    assert os.environ["SDL_VIDEODRIVER"] == "dummy"
    assert os.environ["SDL_AUDIODRIVER"] == "pulseaudio", "the user's choice is kept"
    restore()
    assert "SDL_VIDEODRIVER" not in os.environ
    assert os.environ["SDL_AUDIODRIVER"] == "pulseaudio"


def test_eval_video_prints_no_sdl_line(tmp_path: Path) -> None:
    pytest.importorskip("pygame")
    pytest.importorskip("imageio")
    run = tmp_path / "run"
    rlblocks.train("dqn", env="CartPole-v1", max_env_steps=1100, run_dir=run, loggers=[],
                   progress=False, overrides=["trainer.warmup_steps=1000"])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDL_", "XDG_RUNTIME"))}
    proc = subprocess.run(
        [sys.executable, "-m", "rlblocks", "eval", str(run), "--episodes", "1", "--max-frames",
         "20", "--video", str(tmp_path / "cart.gif")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cart.gif").stat().st_size > 0
    assert "XDG_RUNTIME_DIR" not in proc.stderr and "error" not in proc.stderr, proc.stderr


def test_list_leaves_out_the_plugin_template_unless_all(capsys, rlblocks_registries) -> None:
    from rlblocks.plugins import AlgoSpec

    template = AlgoSpec(name="zz-template-algo", summary="a template", impl="x:Y")
    get_registry("algo").add(template, distribution="rlblocks-algo-softq")
    assert cli(["list", "algo"]) == 0
    listed = capsys.readouterr().out
    assert "zz-template-algo" not in listed and "dqn" in listed
    assert cli(["list", "algo", "--all"]) == 0
    assert "zz-template-algo" in capsys.readouterr().out
