"""Whole runs by name: run directory contents, loggers, checkpoints, resume, the CLI."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import CheckpointError, ConfigError, UnknownComponentError
from rlblocks.plugins import hookimpl
from rlblocks.run import latest_checkpoint, load_checkpoint
from rlblocks.testing import CrashAt

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "trainer.checkpoint_interval=200",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


class StepRecorder:
    def __init__(self) -> None:
        self.rollout_steps: list[int] = []
        self.started: list[bool] = []

    @hookimpl
    def rlblocks_run_start(self, config, run_dir, resumed):
        self.started.append(resumed)

    @hookimpl
    def rlblocks_rollout_end(self, stats, env_step):
        self.rollout_steps.append(env_step)


def test_run_directory_holds_config_versions_logs_checkpoints_and_result(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = rlblocks.train(
        "dqn",
        seed=1,
        overrides=SMALL,
        run_dir=run,
        progress=False,
        loggers=["tensorboard", "csv"],
    )
    assert result.env_steps >= 600 and not result.solved
    saved = json.loads((run / "result.json").read_text())
    for key in ("best_test_return", "solved", "env_steps", "gradient_steps", "wall_seconds"):
        assert key in saved
    assert saved["env_steps"] == result.env_steps
    config = json.loads((run / "config.json").read_text())
    assert config["algo_name"] == "dqn" and config["trainer"]["max_env_steps"] == 600
    versions = json.loads((run / "plugins.json").read_text())
    assert versions["components"]["algo:dqn"]["distribution"] == "rlblocks-algo-dqn"
    assert list((run / "logs").glob("events.out.tfevents.*")), "no TensorBoard event file"
    with (run / "logs" / "test.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [200, 400, 600]
    assert (run / "logs" / "metrics.jsonl").read_text().count('"namespace": "test"') == 3
    ckpt = load_checkpoint(latest_checkpoint(run))
    assert ckpt["trainer"]["env_step"] == result.env_steps
    assert (latest_checkpoint(run).parent / "buffer.h5").is_file()


def test_tensorboard_events_contain_test_returns(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    rlblocks.train(
        "dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=["tensorboard"]
    )
    acc = EventAccumulator(str(run / "logs"))
    acc.Reload()
    events = acc.Scalars("test/return_mean")
    assert [e.step for e in events] == [200, 400, 600]


def test_resume_continues_counters_buffer_and_weights(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        rlblocks.train(
            "dqn",
            seed=0,
            overrides=SMALL,
            run_dir=run,
            progress=False,
            loggers=[],
            hooks=[CrashAt(450)],
        )
    ckpt = load_checkpoint(latest_checkpoint(run))
    saved_step = ckpt["trainer"]["env_step"]
    assert 200 <= saved_step < 450
    recorder = StepRecorder()
    result = rlblocks.resume(run, hooks=[recorder])
    assert recorder.started == [True]
    # the resumed run counts on from the checkpoint, not from zero, and skips the warm-up
    assert recorder.rollout_steps[0] > saved_step
    assert recorder.rollout_steps[0] <= saved_step + 8 * 4
    assert result.env_steps >= 600
    assert result.gradient_steps > ckpt["trainer"]["gradient_step"]
    final = load_checkpoint(latest_checkpoint(run))
    assert final["trainer"]["env_step"] == result.env_steps


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_resumed_run_keeps_its_composed_buffer_and_memmap_storage(
    tmp_path: Path, sampler: str
) -> None:
    import numpy as np

    run = tmp_path / "run"
    overrides = [*SMALL, "buffer.name=vector", f"buffer.sampler={sampler}",
                 "buffer.storage=memmap"]
    with pytest.raises(RuntimeError, match="simulated crash"):
        rlblocks.train("dqn", seed=0, overrides=overrides, run_dir=run, progress=False,
                       loggers=[], hooks=[CrashAt(450)])
    saved = load_checkpoint(latest_checkpoint(run))["trainer"]["env_step"]
    seen: dict[str, object] = {}

    class Look:
        @rlblocks.plugins.hookimpl
        def rlblocks_rollout_end(self, stats, env_step, trainer):  # type: ignore[no-untyped-def]
            if not seen:  # the first collect after the resume: the restored buffer
                buf = trainer.buffer
                seen.update(parts=buf.parts(), storage=buf.storage, length=len(buf),
                            mapped=isinstance(buf.storage_arrays["act"], np.memmap))

    rlblocks.resume(run, hooks=[Look()])
    assert seen["storage"] == "memmap" and seen["mapped"]
    assert seen["parts"]["layout"][0] == "vector" and seen["parts"]["sampler"][0] == sampler
    assert seen["length"] > saved  # the checkpoint's transitions plus the first collect
    assert any(p.name.startswith("data.") for p in (run / "buffer").iterdir())


@pytest.mark.parametrize("flush", [True, False])
def test_runs_flush_denormals_while_training_and_restore_the_setting(
    tmp_path: Path, flush: bool
) -> None:
    from rlblocks.run._seeding import _flushing_denormals

    seen: list[bool] = []

    class Look:
        @hookimpl
        def rlblocks_rollout_end(self, stats, env_step):  # type: ignore[no-untyped-def]
            seen.append(_flushing_denormals())

    assert not _flushing_denormals()
    overrides = [*SMALL, f"run.flush_denormals={str(flush).lower()}"]
    rlblocks.train("dqn", seed=0, overrides=overrides, run_dir=tmp_path / "run", progress=False,
                   loggers=[], hooks=[Look()])  # fmt: skip
    assert seen and set(seen) == {flush}
    assert not _flushing_denormals()  # the process gets its setting back


def test_resume_with_override_trains_longer(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    second = rlblocks.resume(run, overrides=["trainer.max_env_steps=800"])
    assert first.env_steps < 800 <= second.env_steps


def test_train_and_resume_take_train_fn_and_test_fn(tmp_path: Path) -> None:
    run = tmp_path / "run"
    seen: list[tuple[str, int, int]] = []

    def train_fn(epoch: int, env_step: int) -> None:
        seen.append(("train", epoch, env_step))

    def test_fn(epoch: int, env_step: int) -> None:
        seen.append(("test", epoch, env_step))

    over = [*SMALL, "trainer.test_at_start=true"]
    rlblocks.train("dqn", seed=0, overrides=over, run_dir=run, progress=False, loggers=[],
                   train_fn=train_fn, test_fn=test_fn)  # fmt: skip
    tests = [(e, s) for k, e, s in seen if k == "test"]
    assert tests[:2] == [(0, 0), (1, 200)] and tests[-1][1] >= 600  # start, schedule, final
    trains = [s for k, _, s in seen if k == "train"]
    assert trains[0] >= 96 and trains == sorted(trains)  # after the warm-up, every collect
    seen.clear()
    rlblocks.resume(run, overrides=["trainer.max_env_steps=800"], train_fn=train_fn,
                    test_fn=test_fn)  # fmt: skip
    assert seen and all(s >= 600 for _, _, s in seen)  # no second start test on resume
    assert seen[-1][0] == "test" and seen[-1][2] >= 800


def test_cli_budget_flag_trains_and_extends_a_run(tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    sets = [a for item in SMALL if not item.startswith("trainer.max_env_steps=")
            for a in ("--set", item)]  # fmt: skip
    common = ["--no-progress", "--logger", "csv"]
    assert cli(["train", "dqn", "--seed", "0", "--run-dir", str(run), *common, *sets,
                "--max-env-steps", "400"]) == 0  # fmt: skip
    first = json.loads((run / "result.json").read_text())["env_steps"]
    assert 400 <= first < 800
    assert cli(["resume", str(run), "--max-env-steps", "8e2"]) == 0
    assert json.loads((run / "result.json").read_text())["env_steps"] >= 800
    assert json.loads((run / "config.json").read_text())["trainer"]["max_env_steps"] == 800
    capsys.readouterr()


def test_unknown_algo_names_installed_ones_and_package(tmp_path: Path, monkeypatch) -> None:
    from rlblocks.plugins import _registry as registry_module

    # a first-party package that is not installed here
    first_party = registry_module.FIRST_PARTY["algo"] | {"zz_missing"}
    monkeypatch.setitem(registry_module.FIRST_PARTY, "algo", first_party)
    with pytest.raises(UnknownComponentError) as info:
        rlblocks.train("zz_missing", progress=False, run_dir=tmp_path)
    message = str(info.value)
    assert "dqn" in message and "pip install ./plugins/algos/zz-missing" in message


def test_unknown_name_gets_no_install_hint_for_a_package_that_does_not_exist(
    tmp_path: Path,
) -> None:
    with pytest.raises(UnknownComponentError) as info:
        rlblocks.train("not-an-algo-anyone-ships", progress=False, run_dir=tmp_path)
    assert "pip install" not in str(info.value)


def test_config_typo_names_field_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$\.algo\.lrr.*did you mean 'lr'"):
        rlblocks.train("dqn", overrides=["algo.lrr=0.1"], run_dir=tmp_path, progress=False)


def test_cli_train_and_resume_end_to_end(tmp_path: Path) -> None:
    run = tmp_path / "cli-run"
    sets = [arg for item in SMALL for arg in ("--set", item)]
    cmd = [
        sys.executable,
        "-m",
        "rlblocks.cli",
        "train",
        "dqn",
        "--seed",
        "2",
        "--run-dir",
        str(run),
        "--no-progress",
        "--logger",
        "csv",
        *sets,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "run directory:" in done.stderr and "rlblocks resume" in done.stderr
    assert json.loads((run / "result.json").read_text())["env_steps"] >= 600
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlblocks.cli",
            "resume",
            str(run),
            "--set",
            "trainer.max_env_steps=700",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "result.json").read_text())["env_steps"] >= 700


def test_cli_reports_config_error_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlblocks.cli",
            "train",
            "dqn",
            "--set",
            "trainer.batch_size=abc",
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "$.trainer.batch_size" in done.stderr and "Traceback" not in done.stderr


def test_configure_runs_before_anything_is_built_and_setup_errors_reach_the_hook(
    tmp_path: Path, monkeypatch
) -> None:
    import rlblocks.run._experiment as experiment
    from rlblocks.plugins import hookimpl

    events: list[str] = []
    real_make = experiment.make_vector_env

    def recording_make(*args, **kwargs):
        events.append("env built")
        return real_make(*args, **kwargs)

    monkeypatch.setattr(experiment, "make_vector_env", recording_make)

    class Listener:
        @hookimpl
        def rlblocks_configure(self, config, run_dir):
            events.append("configure")

        @hookimpl
        def rlblocks_exception(self, exc, where):
            events.append(f"exception in {where}")

    # a PPO buffer too small for one rollout is refused when the trainer is built
    with pytest.raises(ConfigError, match="cannot hold one collect"):
        rlblocks.train(
            "ppo", overrides=["buffer.size=10"], run_dir=tmp_path / "run", progress=False,
            loggers=[], hooks=[Listener()],
        )  # fmt: skip
    assert events[0] == "configure" and "env built" in events
    assert events[-1] == "exception in setup"


class _InfoCartPole(gym.Wrapper):
    """CartPole whose step info reports the cart position."""

    def step(self, action):
        obs, rew, term, trunc, info = self.env.step(action)
        return obs, rew, term, trunc, {**info, "x": float(obs[0])}


def test_env_info_keys_reach_the_run_s_buffer() -> None:
    from rlblocks.run import Experiment, spec_lookup
    from rlblocks.run import _config as cfg

    config = cfg.build_config(
        "dqn", overrides=["env.info_keys=[\"x\"]", "env.num_envs=2", "run.loggers=[]"],
        spec_lookup=spec_lookup,
    )  # fmt: skip
    exp = Experiment(config, None, quiet=True,
                     env_factory=lambda: _InfoCartPole(gym.make("CartPole-v1")))  # fmt: skip
    exp.build()
    try:
        exp.train_collector.collect(n_step=8)
        rows = exp.buffer[exp.buffer.sample_index(0)]
        assert np.allclose(rows.info.x, rows.obs_next[:, 0])
    finally:
        exp.train_envs.close()
        exp.test_envs.close()
    with pytest.raises(ConfigError, match=r"env\.info_keys"):
        cfg.build_config("dqn", overrides=["env.info_keys=3"], spec_lookup=spec_lookup)


def test_a_run_of_a_qualified_name_records_its_distribution_and_describes(tmp_path: Path) -> None:
    from rlblocks.tools import describe_run

    run = tmp_path / "run"
    rlblocks.train("dqn@rlblocks-algo-dqn", seed=0, overrides=SMALL, run_dir=run,
                   progress=False, loggers=[])  # fmt: skip
    versions = json.loads((run / "plugins.json").read_text())
    assert versions["components"]["algo:dqn@rlblocks-algo-dqn"]["distribution"] == (
        "rlblocks-algo-dqn"
    )
    text = describe_run(run)
    assert "ran with: rlblocks" in text and "rlblocks-algo-dqn" in text
    # a run file that names no distribution for a component (written in-process) describes too
    versions["components"]["algo:dqn@rlblocks-algo-dqn"] = None
    (run / "plugins.json").write_text(json.dumps(versions))
    assert "algo:dqn@rlblocks-algo-dqn" in describe_run(run)


def _short_scaled_cartpole():
    """A factory whose env differs from plain CartPole-v1: 50-step episodes, rewards x10."""
    env = gym.make("CartPole-v1", max_episode_steps=50)
    return gym.wrappers.TransformReward(env, lambda r: 10.0 * r)


def test_a_run_of_an_env_factory_is_never_evaluated_or_resumed_on_the_plain_env(
    tmp_path: Path,
) -> None:
    from rlblocks.tools import describe_run

    run = tmp_path / "run"
    result = rlblocks.train("dqn", env=_short_scaled_cartpole, seed=0, overrides=SMALL,
                            run_dir=run, progress=False, loggers=[])  # fmt: skip
    config = json.loads((run / "config.json").read_text())
    assert config["env"]["id"] == "CartPole-v1"
    assert config["env"]["factory"].endswith(":_short_scaled_cartpole")
    # the agent straight from train() knows its factory: episodes of at most 50 steps, x10
    episodes = result.agent.evaluate(episodes=2, seed=0)
    assert (episodes.lengths <= 50).all() and (episodes.returns == 10 * episodes.lengths).all()
    # a loaded agent or a resume cannot rebuild it, and says so rather than use CartPole-v1
    agent = rlblocks.load(run)
    with pytest.raises(ConfigError, match=r"trained on envs made by the factory .*env=<the fact"):
        agent.evaluate(episodes=1)
    with pytest.raises(ConfigError, match="trained on envs made by the factory"):
        agent.record(tmp_path / "x.gif", episodes=1)
    assert agent.evaluate(episodes=1, env=_short_scaled_cartpole).lengths[0] <= 50
    assert agent.evaluate(episodes=1, env="CartPole-v1").lengths[0] >= 1  # asked for explicitly
    with pytest.raises(ConfigError, match=r"resuming it needs it again: rlblocks\.resume\("):
        rlblocks.resume(run, overrides=["trainer.max_env_steps=800"])
    assert "envs from the factory" in describe_run(run, width=400)
    longer = rlblocks.resume(run, overrides=["trainer.max_env_steps=800"],
                             env=_short_scaled_cartpole)  # fmt: skip
    assert longer.env_steps >= 800


def test_a_run_s_config_json_passed_back_asks_for_a_new_run_dir(tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    # in Python the message names the argument; `rlblocks train --config` names the flag
    with pytest.raises(ConfigError, match=r"config sets run\.run_dir=.*pass run_dir=NEW"):
        rlblocks.train("dqn", config=run / "config.json", progress=False)
    assert cli(["train", "dqn", "--config", str(run / "config.json"), "--no-progress"]) == 2
    assert "pass --run-dir NEW" in capsys.readouterr().err
    again = rlblocks.train("dqn", config=run / "config.json", run_dir=tmp_path / "again",
                           progress=False)  # fmt: skip
    assert again.env_steps >= 600  # the saved settings (a 600-step budget), in a new directory


def test_resume_flags_that_would_be_ignored_and_a_run_without_checkpoints(
    tmp_path: Path, capsys
) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    rlblocks.train("dqn", seed=0, overrides=SMALL, run_dir=run, progress=False, loggers=[])
    assert cli(["train", "sac", "--resume", "--run-dir", str(run)]) == 2
    assert "holds a dqn run, not sac" in capsys.readouterr().err
    assert cli(["train", "dqn", "--resume", "--run-dir", str(run), "--env", "Pendulum-v1",
                "--seed", "5"]) == 2  # fmt: skip
    assert "--env, --seed would be ignored" in capsys.readouterr().err
    # a run killed before its first checkpoint: the way out is to train it again
    import shutil

    shutil.rmtree(run / "checkpoints")
    (run / "result.json").unlink()
    with pytest.raises(CheckpointError, match=r"stopped before its first one.*--overwrite"):
        rlblocks.resume(run)


class UpdateLogs:
    def __init__(self) -> None:
        self.env_steps: list[int] = []

    @hookimpl
    def rlblocks_update_end(self, stats, env_step, gradient_step):
        self.env_steps.append(env_step)


def test_trainer_log_interval_sets_how_often_update_statistics_are_logged(tmp_path: Path) -> None:
    every_100, default = UpdateLogs(), UpdateLogs()
    rlblocks.train("dqn", seed=0, overrides=[*SMALL, "trainer.log_interval=100"], loggers=[],
                   run_dir=tmp_path / "a", progress=False, hooks=[every_100])  # fmt: skip
    rlblocks.train("dqn", seed=0, overrides=SMALL, loggers=[], run_dir=tmp_path / "b",
                   progress=False, hooks=[default])  # fmt: skip
    # 600 env steps, learning from 96 on: a log per 100 steps (and the last one at the end)
    assert len(every_100.env_steps) >= 5
    blocks = [step // 100 for step in every_100.env_steps]  # one log per block of 100 steps
    assert all(a < b for a, b in itertools.pairwise(blocks))
    assert default.env_steps == [every_100.env_steps[-1]]  # 1,000: only the final flush
