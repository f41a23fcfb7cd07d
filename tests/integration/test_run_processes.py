"""Processes a command starts for its runs never outlive it.

``rlblocks train --seeds`` runs each seed in a process of its own (and each run may have env
workers of its own): SIGKILL of the command takes them all down; SIGTERM, or a Ctrl-C at the
terminal (SIGINT to the whole process group), stops every running seed after its iteration with
a checkpoint, starts no more, and says in one line what was stopped and how to resume.
``rlblocks tune`` stops its study the same way. The commands run as child processes here, and
their descendants are looked for once they are gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlblocks.run import latest_checkpoint

#: How long a command's processes may take to go once it is gone.
GRACE_S = 5.0
#: Tiny runs with a budget they never reach: the signal always lands mid-run.
RUN = ["--max-env-steps", "1e7", "--set", "env.num_envs=2", "--set", "env.num_test_envs=2",
       "--set", "trainer.test_episodes=2", "--set", "trainer.test_interval=500",
       "--set", "trainer.warmup_steps=100", "--set", "trainer.stop_reward=1e9"]  # fmt: skip

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


# -- processes (psutil when installed, else /proc) ---------------------------------------------
def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, ... (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _descendants(pid: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of every process below ``pid``."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return [(p.pid, str(p.create_time())) for p in psutil.Process(pid).children(True)]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        stat = _stat(int(entry)) if entry.isdigit() else None
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        stat = _stat(child)
        if stat is not None:
            found.append((child, stat[19]))
            todo += children.get(child, [])
    return found


def _alive(proc: tuple[int, str]) -> bool:
    """Whether this very process (not a later one with its pid) still runs; a zombie is gone."""
    pid, started = proc
    try:
        import psutil
    except ImportError:
        stat = _stat(pid)
        return stat is not None and stat[0] != "Z" and stat[19] == started
    try:
        p = psutil.Process(pid)
        return str(p.create_time()) == started and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _survivors(procs: list[tuple[int, str]], within: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in procs if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


@contextlib.contextmanager
def _command(argv: list[str], started: list[Path], log: Path) -> Iterator[Any]:
    """``rlblocks ARGV`` in a session of its own, once every file of ``started`` exists (its
    runs are training): ``(process, its descendants then)``. Whatever the test does, nothing it
    started is left running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlblocks", *argv], stdout=subprocess.PIPE, stderr=err,
            start_new_session=True, env=env, text=True,
            # as from a terminal: SIGINT ends or stops a process, whatever started the tests
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    procs: list[tuple[int, str]] = []
    try:
        deadline = time.monotonic() + 180
        while not all(p.is_file() for p in started):
            assert proc.poll() is None, f"it ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "its runs did not start"
            time.sleep(0.2)
        procs = _descendants(proc.pid)
        assert procs, "it has no child processes"
        yield proc, procs
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        for pid, _ in _survivors(procs, 0.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.stdout.close()


def _seeds(base: Path, backend: str) -> list[str]:
    return ["train", "dqn", "--seeds", "0-3", "--workers", "2", "--backend", backend,
            "--run-dir", str(base), "--no-progress", *RUN]  # fmt: skip


@pytest.mark.slow
def test_seeds_and_their_env_workers_die_with_the_command_on_sigkill(tmp_path: Path) -> None:
    base = tmp_path / "seeds"
    started = [base / f"seed-{s}" / "config.json" for s in (0, 1)]
    with _command(_seeds(base, "subproc"), started, tmp_path / "err") as (proc, procs):
        assert len(procs) >= 4  # two seeds, each with env workers
        proc.kill()
        proc.wait(60)
        left = _survivors(procs, GRACE_S)
        assert not left, f"{len(left)} of {len(procs)} processes outlived the command's SIGKILL"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_a_signal_stops_the_seeds_with_checkpoints_and_says_how_to_resume(
    tmp_path: Path, how: str
) -> None:
    base = tmp_path / "seeds"
    started = [base / f"seed-{s}" / "config.json" for s in (0, 1)]
    log = tmp_path / "err"
    with _command(_seeds(base, "dummy"), started, log) as (proc, procs):
        if how == "Ctrl-C":  # the terminal signals the whole foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 130, log.read_text()[-3000:]
        assert not _survivors(procs, GRACE_S)
    name = "SIGINT" if how == "Ctrl-C" else "SIGTERM"
    note = out.strip().splitlines()[-1]  # the one line on what was done
    assert note.startswith(f"{name}: stopped seed(s) 0, 1 ")
    assert f"rlblocks resume {base / 'seed-0'}" in note
    assert "seed(s) 2, 3 not started" in note
    # asked once, each stopped after its iteration (not at once) and wrote a checkpoint
    assert f"seed 0: interrupted by {name}" in out and "stopped at once" not in out
    summary = json.loads((base / "summary.json").read_text())
    assert summary["interrupted"] == [0, 1] and summary["not_started"] == [2, 3]
    for s in (0, 1):
        assert latest_checkpoint(base / f"seed-{s}") is not None
    # the first line names the seeds still running when the signal was handled (under load a
    # seed that took the terminal's Ctrl-C itself may already be on its way out)
    assert re.search(rf"{name}: stopping seeds \[(0, 1|0|1)\] after their current iteration",
                     log.read_text())  # fmt: skip


@pytest.mark.slow
def test_sigterm_stops_a_study_between_trials_and_leaves_no_worker(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    import optuna

    root = tmp_path / "tune"
    argv = ["tune", "dqn", "--trials", "3", "--run-dir", str(root),
            "--param", "algo.lr=loguniform:1e-4:1e-3", "--set", "env.backend=subproc",
            *RUN]  # fmt: skip
    log = tmp_path / "err"
    with _command(argv, [root / "trial-0" / "config.json"], log) as (proc, procs):
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 130, log.read_text()[-3000:]
        assert not _survivors(procs, GRACE_S)
    assert out.strip().splitlines()[-1].startswith("SIGTERM: stopped trial 0 ")
    assert not (root / "trial-1").exists()  # no trial started after the signal
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{root / 'study.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]
