"""``trainer.async_collect``: off-policy runs collected by the AsyncCollector, chosen by config,
resumable, and refused with the reason where asynchronous collection cannot work."""

from __future__ import annotations

import warnings
from pathlib import Path

import attrs
import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.collect import AsyncCollector
from rlblocks.contracts import AsyncVectorEnv, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import build_config, make_auto_vector_env, spec_lookup
from rlblocks.run._compose import check_async_collect, check_training
from rlblocks.run._experiment import ASYNC_NOT_REPRODUCIBLE

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=300",
    "trainer.test_episodes=4",
    "trainer.checkpoint_interval=300",
    "env.num_envs=4",
    "env.num_test_envs=2",
]
# every env in its own worker, and a collect round goes on once any two are back
ASYNC = ["trainer.async_collect=true", "env.backend=subproc", "env.num_workers=4",
         "env.local_envs=0", "env.wait_num=2"]  # fmt: skip


class Rollouts:
    """Which collector the trainer used, and how many envs had a step in flight after each
    training collect."""

    def __init__(self) -> None:
        self.collectors: set[str] = set()
        self.in_flight: list[int] = []

    @hookimpl
    def rlblocks_rollout_end(self, stats, env_step, trainer):
        collector = trainer.train_collector
        self.collectors.add(type(collector).__name__)
        self.in_flight.append(len(getattr(collector, "in_flight", ())))


def test_an_async_collect_run_collects_with_the_async_collector_and_resumes(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    rec = Rollouts()
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")  # every time it is said, not once per process
        result = rlblocks.train(
            "dqn", seed=0, overrides=[*SMALL, *ASYNC], run_dir=run, progress=False, hooks=[rec],
            loggers=[],
        )  # fmt: skip
    # the run says, once and on one line, that it is not bit-reproducible
    said = [str(w.message) for w in told if "async_collect" in str(w.message)]
    assert said == [ASYNC_NOT_REPRODUCIBLE] and "\n" not in said[0]
    assert "not bit-reproducible" in said[0] and "trainer.async_collect=false" in said[0]
    assert rec.collectors == {"AsyncCollector"}
    # wait_num=2 of 4 envs: some collects return with steps still running (a synchronous
    # collector never leaves one in flight)
    assert max(rec.in_flight) > 0
    assert result.env_steps >= 600 and result.gradient_steps > 0
    assert np.isfinite(result.best_test_return)
    again = Rollouts()
    more = rlblocks.resume(run, overrides=["trainer.max_env_steps=900"], hooks=[again])
    assert again.collectors == {"AsyncCollector"} and more.env_steps >= 900


class Checkpoints:
    """At each checkpoint: the envs with a step in flight, the trainer's env steps and the
    collector's own step count."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    @hookimpl
    def rlblocks_checkpoint_save(self, checkpoint, trainer):
        collector = trainer.train_collector
        self.seen.append(
            (len(collector.in_flight), trainer.state.env_step, collector.total_steps)
        )


def test_an_async_run_takes_back_steps_in_flight_before_each_checkpoint(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint is taken with no step in flight (drained into the buffer and counted), so
    it snapshots the envs and the resumed run continues their episodes instead of restarting."""
    run = tmp_path / "run"
    rec, ckpt = Rollouts(), Checkpoints()
    result = rlblocks.train(
        "dqn", seed=0, overrides=[*SMALL, *ASYNC], run_dir=run, progress=False,
        hooks=[rec, ckpt], loggers=[],
    )  # fmt: skip
    assert max(rec.in_flight) > 0  # steps were in flight between collects
    assert len(ckpt.seen) >= 2
    for in_flight, trainer_steps, collector_steps in ckpt.seen:
        assert in_flight == 0
        # every step the collector took is the run's (none drained and left uncounted)
        assert trainer_steps == collector_steps
    assert result.env_steps == ckpt.seen[-1][1]
    capfd.readouterr()
    rlblocks.resume(run, overrides=["trainer.max_env_steps=900"], hooks=[])
    assert "restart on resume" not in capfd.readouterr().err


def test_the_command_line_says_once_on_one_line_that_an_async_run_is_not_reproducible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlblocks.cli import main as cli

    sets = [a for o in [*SMALL, *ASYNC, "trainer.max_env_steps=200"] for a in ("--set", o)]
    args = ["train", "dqn", "--seed", "0", "--run-dir", str(tmp_path / "run"), "--no-progress"]
    assert cli([*args, *sets]) == 0
    told = [line for line in capsys.readouterr().err.splitlines() if "async_collect" in line]
    assert told == [f"warning: {ASYNC_NOT_REPRODUCIBLE}"]


def test_the_synchronous_collector_stays_the_default(tmp_path: Path) -> None:
    rec = Rollouts()
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        rlblocks.train(
            "dqn", seed=0, overrides=[*SMALL, "env.backend=subproc", "trainer.max_env_steps=200"],
            run_dir=tmp_path / "run", progress=False, hooks=[rec], loggers=[],
        )  # fmt: skip
    assert rec.collectors == {"Collector"} and set(rec.in_flight) == {0}
    assert not [w for w in told if "async_collect" in str(w.message)]  # reproducible: no word


def _config(algo: str, *overrides: str):
    return build_config(
        algo, overrides=["trainer.async_collect=true", *overrides], spec_lookup=spec_lookup
    )


@pytest.mark.parametrize(
    ("algo", "overrides", "words"),
    [
        ("ppo", ["env.backend=subproc"], "algo 'ppo' trains on-policy"),
        ("dqn", ["env.backend=dummy"], "the 'dummy' backend steps all its envs together"),
        ("dqn", ["env.backend=subproc", "trainer.batch_mode=complete_episodes"],
         "trainer.batch_mode='complete_episodes' steps every env together"),
        ("dqn", ["env.backend=subproc", "trainer.rollout_fragment_length=8"],
         "trainer.rollout_fragment_length=8 steps every env together"),
    ],
)  # fmt: skip
def test_async_collect_is_refused_where_it_cannot_work(
    algo: str, overrides: list[str], words: str
) -> None:
    config = _config(algo, *overrides)
    with pytest.raises(ConfigError) as refused:
        check_training(config, spec_lookup("algo", algo))
    text = str(refused.value)
    assert text.startswith("$.trainer.async_collect: ") and words in text
    if "dummy" in words:  # the fix names the installed backends that can
        assert "pick one that does with env.backend (" in text and "subproc" in text


def test_async_collect_is_refused_for_multi_agent_and_offline_runs() -> None:
    config = _config("dqn", "env.backend=subproc")
    multi = attrs.evolve(config, env=attrs.evolve(config.env, id="pettingzoo.mpe:parallel_env"))
    with pytest.raises(ConfigError, match=r"the 'pettingzoo' family .*collected synchronously"):
        check_async_collect(multi, spec_lookup("algo", "dqn"))
    with pytest.raises(ConfigError, match="trains offline: an offline run collects no env"):
        check_async_collect(config, spec_lookup("algo", "td3bc"))


def test_an_async_collect_run_refuses_the_backend_auto_would_not_step_asynchronously(
    tmp_path: Path,
) -> None:
    # named directly, dummy is refused before anything is built
    with pytest.raises(ConfigError, match="the 'dummy' backend steps all its envs together"):
        rlblocks.train("dqn", overrides=[*SMALL, "trainer.async_collect=true"],
                       run_dir=tmp_path / "run", progress=False, loggers=[])  # fmt: skip
    assert not (tmp_path / "run" / "config.json").exists()


def test_auto_asked_for_asynchronous_stepping_chooses_only_among_such_backends() -> None:
    fns = [lambda: gym.make("CartPole-v1")] * 4
    venv = make_auto_vector_env(fns, probe_seconds=0.05, verbose=False, asynchronous=True)
    try:
        assert isinstance(venv, AsyncVectorEnv)
        assert "only backends that step envs asynchronously considered" in venv.auto_choice
    finally:
        venv.close()
    # without it, CartPole's 5-microsecond step stays in this process (no async stepping)
    venv = make_auto_vector_env(fns, probe_seconds=0.05, verbose=False)
    try:
        assert "asynchronously" not in venv.auto_choice
    finally:
        venv.close()


def test_an_auto_backend_run_with_async_collect_trains_asynchronously(tmp_path: Path) -> None:
    rec = Rollouts()
    rlblocks.train(
        "dqn", seed=0,
        overrides=[*SMALL, "trainer.async_collect=true", "env.backend=auto",
                   "trainer.max_env_steps=300"],
        run_dir=tmp_path / "run", progress=False, hooks=[rec], loggers=[],
    )  # fmt: skip
    assert rec.collectors == {AsyncCollector.__name__}
