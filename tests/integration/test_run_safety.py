"""Run directories under faults: one run per directory, no silent replacement, finished runs
extended only on purpose, SIGINT/SIGTERM stop with a checkpoint, stale temporaries cleaned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import ConfigError
from rlblocks.run import RunDirLock, latest_checkpoint, load_checkpoint

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


@pytest.mark.skipif(sys.platform == "win32", reason="run directories are locked on POSIX only")
def test_a_lock_probed_for_an_instant_is_still_taken(tmp_path: Path) -> None:
    # `rlblocks describe` takes a shared lock for an instant to see whether a run is live
    import fcntl
    import threading

    run = tmp_path / "run"
    run.mkdir()
    probe = os.open(run / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(probe, fcntl.LOCK_SH)
    threading.Timer(0.1, os.close, args=(probe,)).start()
    lock = RunDirLock(run)
    lock.acquire()  # retries past the probe instead of calling the directory in use
    try:
        assert (run / ".lock").read_text() == str(os.getpid())
    finally:
        lock.release()


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
            "--set", "trainer.checkpoint_interval=1000000", "--stop-reward", "1e9"]  # fmt: skip
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
    ckpt = load_checkpoint(latest_checkpoint(run))
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


# -- checkpoint generations -------------------------------------------------------------------


def _gen_store(tmp_path: Path):
    import torch

    from rlblocks.run import GenerationStore, save_checkpoint

    store = GenerationStore(tmp_path / "checkpoints")

    def commit(step: int) -> Path:
        def write(gen: Path) -> dict:
            save_checkpoint(gen / "latest.pt", {"trainer": {"env_step": step}, "policy": {},
                                               "w": torch.full((64,), float(step))})  # fmt: skip
            (gen / "buffer.h5").write_bytes(bytes([step % 256]) * 1000)
            return {"env_step": step}

        return store.commit(write)

    return store, commit


def test_generations_commit_keep_two_and_fall_back_past_damage(tmp_path: Path) -> None:
    store, commit = _gen_store(tmp_path)
    for step in (100, 200, 300):
        newest = commit(step)
    assert [g.name for g in store.generations()] == ["gen-00000003", "gen-00000002"]
    assert (store.root / "CURRENT").read_text().strip() == "gen-00000003"
    assert store.latest_good() == newest
    # flip bytes in the middle of the newest buffer: the one before it is used, with a warning
    data = bytearray((newest / "buffer.h5").read_bytes())
    data[500] ^= 0xFF
    (newest / "buffer.h5").write_bytes(bytes(data))
    warned: list[str] = []
    good = store.latest_good(warn=warned.append)
    assert good is not None and good.name == "gen-00000002"
    assert warned and "gen-00000003/buffer.h5 is damaged" in warned[0]
    (good / "latest.pt").write_bytes(b"truncated")
    with pytest.raises(Exception, match="no intact checkpoint"):
        store.latest_good()


def test_a_damaged_generation_never_costs_the_good_one_a_resume_fell_back_to(tmp_path) -> None:
    # resume after damage: training goes on from gen 1 and saves gen 3; gen 1 stays the
    # fallback until two whole generations are newer, and only then does the damaged one go
    store, commit = _gen_store(tmp_path)
    commit(100)
    second = commit(200)
    (second / "latest.pt").write_bytes(b"truncated")
    assert store.latest_good().name == "gen-00000001"
    commit(300)
    assert [g.name for g in store.generations()] == ["gen-00000003", "gen-00000002",
                                                      "gen-00000001"]  # fmt: skip
    (store.root / "gen-00000003" / "buffer.h5").write_bytes(b"cut")  # the new one breaks too
    assert store.latest_good().name == "gen-00000001"  # still there to fall back to
    commit(400)
    commit(500)
    assert [g.name for g in store.generations()] == ["gen-00000005", "gen-00000004"]


def test_a_crash_while_writing_a_generation_leaves_the_previous_one_current(tmp_path) -> None:
    store, commit = _gen_store(tmp_path)
    first = commit(100)

    def crash(gen: Path) -> dict:
        (gen / "latest.pt").write_bytes(b"half")
        raise OSError("No space left on device")

    from rlblocks.contracts import CheckpointError

    with pytest.raises(CheckpointError, match="No space left on device; free space"):
        store.commit(crash)
    assert store.latest_good() == first
    assert not list(store.root.glob(".gen-*")) and not list(store.root.glob("*.tmp"))


def test_best_pt_with_flipped_bytes_is_refused(tmp_path: Path) -> None:
    import torch

    from rlblocks.run._checkpoint import save_checkpoint_verified

    path = tmp_path / "best.pt"
    save_checkpoint_verified(path, {"policy": {"w": torch.ones(1000)}})
    assert load_checkpoint(path)["policy"]["w"].sum() == 1000
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="damaged"):
        load_checkpoint(path)


KILL_RUNS = {
    # algo, env, settings of a run that checkpoints often and never ends on its own
    "dqn": ("CartPole-v1", [*SMALL, "trainer.checkpoint_interval=64",
                            "trainer.test_interval=100000"]),
    "ppo": ("CartPole-v1", ["env.num_envs=4", "env.num_test_envs=4", "trainer.test_episodes=4",
                            "trainer.step_per_collect=256", "trainer.checkpoint_interval=256",
                            "trainer.test_interval=100000"]),
    "sac": ("Pendulum-v1", ["env.num_envs=1", "env.num_test_envs=2", "trainer.test_episodes=2",
                            "trainer.warmup_steps=200", "trainer.checkpoint_interval=100",
                            "trainer.test_interval=100000"]),
}  # fmt: skip


def _cli_opts(algo: str, budget: int) -> list[str]:
    env, sets = KILL_RUNS[algo]
    sets = [*sets, f"trainer.max_env_steps={budget}"]
    return ["--env", env, "--no-progress", "--stop-reward", "1e9",
            *[a for s in sets for a in ("--set", s)]]  # fmt: skip


def _final_weights(run: Path) -> dict:
    return load_checkpoint(latest_checkpoint(run))["policy"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(KILL_RUNS))
def test_sigkill_at_random_moments_loses_nothing_and_resumes_bit_identical(
    tmp_path: Path, algo: str
) -> None:
    """14 kill -9 of a training process at random moments, each followed by checks and a
    resume: every committed generation verifies, its trainer state, manifest and buffer agree,
    no temporary file is left once the next run has started, and the run finally ends with
    the weights of the same run left alone."""
    import random

    import h5py
    import torch

    from rlblocks.run import GenerationStore

    rng = random.Random(0)
    run = tmp_path / "run"
    base = [sys.executable, "-m", "rlblocks"]
    # a kill lands at a random moment of training, after the process has started (which takes
    # longer on a loaded machine, or under coverage): measured here, not assumed
    began = time.monotonic()
    # (rlblocks' faces import on first use: name what a training run imports)
    probe = "from rlblocks.run import Experiment, train; import torch, gymnasium"
    subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True, timeout=300)
    startup = time.monotonic() - began
    kills = 0
    last_step = -1
    while kills < 14:
        if (run / "config.json").is_file():
            argv = [*base, "resume", str(run)]
        else:
            argv = [*base, "train", algo, "--run-dir", str(run), *_cli_opts(algo, 10**8)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(startup + rng.uniform(1.0, 4.0))
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        proc.kill()
        proc.wait()
        kills += 1
        store = GenerationStore(run / "checkpoints")
        gens = store.generations()
        if not gens:
            continue  # killed before the first checkpoint
        for gen in gens:  # every generation on disk is whole
            assert store.verify(gen) == "", store.verify(gen)
            manifest = store.manifest(gen)
            ckpt = load_checkpoint(gen / "latest.pt")
            assert ckpt["trainer"]["env_step"] == manifest["env_step"]
            if algo != "ppo":  # an on-policy run keeps no buffer between updates
                with h5py.File(gen / "buffer.h5", "r") as f:
                    assert len(f.keys()) > 0
        current = store.latest_good()
        step = load_checkpoint(current / "latest.pt")["trainer"]["env_step"]
        assert step >= last_step  # progress is never lost
        last_step = step
    assert last_step > 0
    budget = last_step + 300
    resumed = subprocess.run([*base, "resume", str(run), "--set",
                              f"trainer.max_env_steps={budget}"],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "restart" not in resumed.stderr
    assert not list(run.rglob("*.tmp")) and not list((run / "checkpoints").glob(".gen-*"))
    whole = tmp_path / "whole"
    alone = subprocess.run([*base, "train", algo, "--run-dir", str(whole),
                            *_cli_opts(algo, budget)],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    a, b = _final_weights(whole), _final_weights(run)
    assert json.loads((run / "result.json").read_text())["env_steps"] == json.loads(
        (whole / "result.json").read_text()
    )["env_steps"]
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


def test_resume_continues_the_exploration_and_global_random_streams(tmp_path: Path) -> None:
    import random

    import numpy as np

    from rlblocks.run._seeding import _numpy_rng_state, _set_numpy_rng_state

    policy = rlblocks.make_policy("dqn", *_spaces())
    policy.seed(3)
    policy._rng.random(5)  # part way through its stream
    saved = policy.extra_state()
    expected = policy._rng.random(4)
    fresh = rlblocks.make_policy("dqn", *_spaces())
    fresh.seed(99)
    fresh.load_extra_state(saved)
    assert np.array_equal(fresh._rng.random(4), expected)
    np.random.seed(5)
    state = _numpy_rng_state()
    want = np.random.random(3)
    np.random.seed(6)
    _set_numpy_rng_state(state)
    assert np.array_equal(np.random.random(3), want)
    run = tmp_path / "run"
    _train(run)
    payload = load_checkpoint(latest_checkpoint(run))
    assert {"torch_rng", "python_rng", "numpy_rng"} <= set(payload)
    assert "rng" in payload["policy_extra"]
    random.setstate((payload["python_rng"][0], tuple(payload["python_rng"][1]),
                     payload["python_rng"][2]))  # fmt: skip


def _spaces():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space
