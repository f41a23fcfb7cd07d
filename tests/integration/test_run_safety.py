"""Run directories under faults: one run per directory, no silent replacement, finished runs
extended only on purpose, SIGINT/SIGTERM stop with a checkpoint, stale temporaries cleaned."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlblocks
from rlblocks.checkpoint import load_checkpoint
from rlblocks.cli import main as cli
from rlblocks.errors import ConfigError
from rlblocks.experiment import RunDirLock

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


def _train(run: Path, **kwargs):
    return rlblocks.train("dqn", seed=0, overrides=kwargs.pop("overrides", SMALL), run_dir=run,
                          progress=False, loggers=[], **kwargs)  # fmt: skip


def test_a_locked_run_directory_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lock = RunDirLock(run)
    lock.acquire()
    try:
        with pytest.raises(ConfigError, match="in use by another run"):
            _train(run)
    finally:
        lock.release()
    assert _train(run).env_steps >= 600  # free again


@pytest.mark.slow
def test_training_into_an_existing_run_needs_overwrite_or_resume(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    first = _train(run)
    stamp = (run / "result.json").read_text()
    with pytest.raises(ConfigError, match="already holds a run"):
        _train(run)
    assert (run / "result.json").read_text() == stamp  # nothing touched
    (run / "mine.txt").write_text("not a run file")
    second = _train(run, overrides=[*SMALL, "trainer.max_env_steps=400"], overwrite=True)
    assert second.env_steps < first.env_steps
    assert (run / "mine.txt").read_text() == "not a run file"  # only run files were replaced
    rc = cli(["train", "dqn", "--run-dir", str(run), "--no-progress"])
    assert rc == 2 and "already holds a run" in capsys.readouterr().err


@pytest.mark.slow
def test_a_finished_run_is_extended_only_with_a_new_budget(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run)
    with pytest.raises(ConfigError, match=r"finished .* at 6\d\d env steps.*max_env_steps="):
        rlblocks.resume(run)
    longer = rlblocks.resume(run, overrides=["trainer.max_env_steps=1000"])
    assert longer.env_steps >= 1000
    saved = json.loads((run / "result.json").read_text())
    assert saved["env_steps"] == longer.env_steps


def _spawn_train(run: Path, steps: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rlblocks", "train", "dqn", "--run-dir", str(run),
            "--no-progress", *[a for s in SMALL for a in ("--set", s)],
            "--set", f"trainer.max_env_steps={steps}",
            "--set", "trainer.checkpoint_interval=1000000"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_training(proc: subprocess.Popen, run: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not (run / "tests.csv").is_file():  # the first test has run: training is under way
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "training did not start"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_stop_with_a_checkpoint_that_resumes(tmp_path: Path, sig) -> None:
    run = tmp_path / "run"
    proc = _spawn_train(run, steps=10_000_000)
    _wait_for_training(proc, run)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}" in err
    ckpt = load_checkpoint(run / "checkpoints" / "latest.pt")
    steps = ckpt["trainer"]["env_step"]
    assert steps > 0
    result = rlblocks.resume(run, overrides=[f"trainer.max_env_steps={steps + 400}"])
    assert result.env_steps >= steps + 400


def test_stale_temporaries_of_a_killed_run_are_removed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    stale = [run / ".result.json.abc.tmp", run / "checkpoints" / ".latest.pt.x1y2.tmp"]
    for f in stale:
        f.write_bytes(b"half a file")
    keep = run / "checkpoints" / "notes.txt"
    keep.write_text("mine")
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    assert not any(f.exists() for f in stale)
    assert not list(run.rglob("*.tmp"))
    assert keep.read_text() == "mine"
