"""Offline runs by name: ``rlblocks.train("td3bc", dataset=...)`` and ``rlblocks train td3bc
--dataset`` learn from an hdf5 dataset with the OfflineTrainer (no training env, a budget in
gradient steps), checkpoints record the dataset's fingerprint instead of a copy, and a resume
reloads it and refuses a file that vanished or changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import CheckpointError, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import latest_checkpoint, load_checkpoint
from rlblocks.tools import describe_run
from rlblocks.trainers import OfflineTrainer

#: a small, quick schedule: tests every 100 gradient steps, checkpoints every 100
SMALL = [
    "trainer.test_interval=100",
    "trainer.test_episodes=1",
    "trainer.test_screen_episodes=0",
    "trainer.checkpoint_interval=100",
    "trainer.batch_size=32",
    "trainer.step_per_round=50",
    "env.num_test_envs=1",
    "algo.hidden_sizes=[32]",
]


def _save_dataset(path: Path, env_id: str = "Pendulum-v1", n: int = 1_000, seed: int = 0) -> Path:
    """``n`` transitions of random actions on ``env_id``, saved with ``save_hdf5``."""
    envs = rlblocks.make_vector_env("dummy", env_id, num_envs=1, seed=seed)
    buffer = rlblocks.make_buffer("replay", size=n, num_envs=1, seed=seed)
    policy = rlblocks.make_policy("td3bc", envs.observation_space, envs.action_space,
                                  hidden_sizes=[8])  # fmt: skip
    Collector(policy, envs, buffer, seed=seed).collect(n_step=n, random=True)
    envs.close()
    buffer.save_hdf5(path)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_dataset(tmp_path_factory.mktemp("data") / "pendulum.h5")


class TrainerSpy:
    """Records the trainer a run uses and the progress at each test."""

    def __init__(self) -> None:
        self.trainers: list[Any] = []
        self.tests: list[tuple[int, int]] = []

    @hookimpl
    def rlblocks_test_end(self, stats, env_step, trainer):
        self.trainers.append(trainer)
        self.tests.append((env_step, trainer.state.gradient_step))


class StopAt:
    """Asks the run to stop (as SIGINT does) once a test at ``step`` gradient steps is done."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def rlblocks_test_end(self, stats, env_step, trainer):
        if trainer.state.gradient_step == self.step:
            trainer.request_stop("interrupted by a test")


def _train(dataset: Path, run_dir: Path, steps: int = 200, **kwargs: Any) -> Any:
    return rlblocks.train("td3bc", env="Pendulum-v1", dataset=dataset, max_gradient_steps=steps,
                          run_dir=run_dir, seed=0, loggers=[], progress=False, quiet=True,
                          overrides=SMALL, **kwargs)  # fmt: skip


def test_train_td3bc_from_a_dataset_runs_the_offline_trainer(dataset: Path, tmp_path: Path) -> None:
    before = _sha(dataset)
    spy = TrainerSpy()
    run = tmp_path / "run"
    result = _train(dataset, run, hooks=[spy])
    assert isinstance(spy.trainers[0], OfflineTrainer)
    assert spy.trainers[0].train_collector is None  # no training env, no collector
    assert (result.env_steps, result.gradient_steps) == (0, 200)
    assert result.stop_reason == "reached max_gradient_steps=200"
    assert spy.tests == [(0, 100), (0, 200)]
    saved = json.loads((run / "result.json").read_text())
    assert (saved["env_steps"], saved["gradient_steps"]) == (0, 200)
    config = json.loads((run / "config.json").read_text())
    assert config["buffer"]["dataset"] == str(dataset.resolve())  # absolute, for a resume
    assert config["trainer"]["max_gradient_steps"] == 200
    # checkpoints never copy the dataset; they record its fingerprint
    assert not list(run.rglob("buffer.h5"))
    payload = load_checkpoint(latest_checkpoint(run))
    assert payload["dataset"]["sha256"] == before
    assert payload["dataset"]["size"] == dataset.stat().st_size
    assert _sha(dataset) == before  # read, never written
    rows = (run / "tests.csv").read_text().splitlines()
    assert [r.split(",")[2] for r in rows[1:]] == ["100", "200"]  # gradient_steps column
    text = describe_run(run, width=1_000)
    assert "offline, from the dataset" in text
    assert "last at gradient step 200" in text
    assert "gen-00000002 at gradient step 200" in text
    agent = rlblocks.load(run)  # the run's agent acts on raw Pendulum observations
    assert agent.act(np.zeros(3, np.float32)).shape == (1,)
    assert "time: update " in text and "collect" not in text.split("time:")[1].split("\n")[0]


def test_cli_trains_td3bc_from_a_dataset(dataset: Path, tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    run = tmp_path / "run"
    sets = [a for item in SMALL for a in ("--set", item)]
    assert cli(["train", "td3bc", "--env", "Pendulum-v1", "--dataset", str(dataset),
                "--max-gradient-steps", "1e2", "--run-dir", str(run), "--logger", "csv",
                *sets]) == 0  # fmt: skip
    out = capsys.readouterr()
    saved = json.loads((run / "result.json").read_text())
    assert (saved["env_steps"], saved["gradient_steps"]) == (0, 100)
    assert "for 100 gradient steps" in out.out + out.err
    assert "gradient step 100/100: test return" in out.out + out.err
    # a finished run continues only with a larger gradient-step budget
    with pytest.raises(ConfigError, match=r"trainer\.max_gradient_steps=200"):
        rlblocks.resume(run)
    capsys.readouterr()
    assert cli(["resume", str(run)]) == 2
    assert "--max-gradient-steps 200" in capsys.readouterr().err
    assert cli(["resume", str(run), "--max-gradient-steps", "200", "--no-progress"]) == 0
    assert json.loads((run / "result.json").read_text())["gradient_steps"] == 200
    capsys.readouterr()


def test_offline_and_online_settings_are_refused_by_name(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"buffer\.dataset.*--dataset FILE"):
        rlblocks.train("td3bc", env="Pendulum-v1", run_dir=tmp_path / "a", overrides=SMALL,
                       quiet=True, loggers=[])  # fmt: skip
    with pytest.raises(ConfigError, match=r"\$\.buffer\.dataset: algo 'td3' trains off-policy"):
        rlblocks.train("td3", env="Pendulum-v1", dataset=dataset, run_dir=tmp_path / "b",
                       quiet=True, loggers=[])  # fmt: skip
    with pytest.raises(ConfigError, match=r"max_gradient_steps.*--max-env-steps"):
        rlblocks.train("td3", env="Pendulum-v1", max_gradient_steps=10, run_dir=tmp_path / "c",
                       quiet=True, loggers=[])  # fmt: skip
    with pytest.raises(ConfigError, match=r"max_env_steps.*--max-gradient-steps"):
        rlblocks.train("td3bc", env="Pendulum-v1", dataset=dataset, max_env_steps=1_000,
                       run_dir=tmp_path / "d", quiet=True, loggers=[])  # fmt: skip
    with pytest.raises(ConfigError, match=r"buffer\.dataset: .*missing\.h5 is not a file"):
        _train(tmp_path / "missing.h5", tmp_path / "e")
    with pytest.raises(ConfigError, match=r"\$\.algo\.intrinsic: algo 'td3bc' trains offline"):
        rlblocks.train("td3bc", env="Pendulum-v1", dataset=dataset, max_gradient_steps=10,
                       run_dir=tmp_path / "f", quiet=True, loggers=[],
                       overrides=["algo.intrinsic=icm"])  # fmt: skip
    for name in "abcdef":  # a refused start leaves nothing behind
        assert not (tmp_path / name / "config.json").exists()


def test_a_dataset_of_another_env_is_refused(tmp_path: Path) -> None:
    # MountainCarContinuous: 2 observation features, 1 action; Pendulum has 3 and 1
    other = _save_dataset(tmp_path / "car.h5", "MountainCarContinuous-v0", n=200)
    with pytest.raises(ConfigError, match=r"observations in .*car\.h5 have shape \(2,\).*\(3,\)"):
        _train(other, tmp_path / "run")


def test_an_interrupted_offline_run_resumes_at_its_gradient_step(
    dataset: Path, tmp_path: Path
) -> None:
    whole = _train(dataset, tmp_path / "whole", steps=300)
    run = tmp_path / "run"
    stopped = _train(dataset, run, steps=300, hooks=[StopAt(100)])
    assert stopped.stop_reason.startswith("interrupted")
    assert stopped.gradient_steps == 100
    spy = TrainerSpy()
    resumed = rlblocks.resume(run, hooks=[spy])
    assert spy.tests == [(0, 200), (0, 300)]  # on from gradient step 100, not from 0
    assert (resumed.env_steps, resumed.gradient_steps) == (0, 300)
    # the same batches and weights as the run left alone (the sampling stream continues)
    assert resumed.last_test_return == pytest.approx(whole.last_test_return)
    a = load_checkpoint(latest_checkpoint(tmp_path / "whole"))["policy"]
    b = load_checkpoint(latest_checkpoint(run))["policy"]
    for key in a:
        assert torch.equal(a[key], b[key]), key
    rows = (run / "tests.csv").read_text().splitlines()[1:]
    assert [r.split(",")[2] for r in rows] == ["100", "200", "300"]


def test_resume_refuses_a_dataset_that_vanished_or_changed(dataset: Path, tmp_path: Path) -> None:
    data = shutil.copy(dataset, tmp_path / "data.h5")
    run = tmp_path / "run"
    _train(Path(data), run, steps=300, hooks=[StopAt(100)])
    moved = tmp_path / "moved.h5"
    Path(data).rename(moved)
    gone = r"data\.h5 this run trained on is gone.*--set buffer\.dataset=FILE"
    with pytest.raises(CheckpointError, match=gone):
        rlblocks.resume(run)
    _save_dataset(Path(data), seed=1)  # another file at the same path
    with pytest.raises(CheckpointError, match=r"data\.h5 changed since the run's checkpoint"):
        rlblocks.resume(run)
    # a copy of the right file elsewhere is accepted when the run is pointed at it
    result = rlblocks.resume(run, overrides=[f"buffer.dataset={moved}"])
    assert result.gradient_steps == 300
    assert json.loads((run / "config.json").read_text())["buffer"]["dataset"] == str(moved)
    assert np.isfinite(result.best_test_return)


def test_dry_run_checks_the_offline_settings(dataset: Path, tmp_path: Path, capsys) -> None:
    from rlblocks.cli import main as cli

    common = ["train", "td3bc", "--env", "Pendulum-v1", "--dry-run"]
    assert cli([*common, "--dataset", str(dataset)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["buffer"]["dataset"] == str(dataset.resolve())
    assert shown["trainer"]["max_gradient_steps"] == 1_000_000  # TD3+BC's default budget
    assert cli([*common, "--dataset", str(tmp_path / "none.h5")]) == 2
    assert "$.buffer.dataset: " in capsys.readouterr().err
    assert cli([*common]) == 2
    assert "--dataset FILE" in capsys.readouterr().err


def test_an_env_step_budget_set_for_an_offline_run_any_way_is_refused_by_field(
    dataset: Path, tmp_path: Path, capsys
) -> None:
    from rlblocks.cli import main as cli

    common = ["train", "td3bc", "--env", "Pendulum-v1", "--dataset", str(dataset), "--dry-run"]
    for value in ("5000", "1000000"):  # any value, the default's too: it would be ignored
        assert cli([*common, "--set", f"trainer.max_env_steps={value}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: $.trainer.max_env_steps: algo 'td3bc' trains offline")
        assert f"trainer.max_env_steps={value} (--set) would be ignored" in err
        assert err.rstrip().endswith("trainer.max_gradient_steps: --max-gradient-steps N")
    toml = tmp_path / "budget.toml"
    toml.write_text("[trainer]\nmax_env_steps = 5000\n")
    assert cli([*common, "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert f"max_env_steps=5000 (the config file {toml}) would be ignored" in err
    # from Python the fix names the argument
    with pytest.raises(ConfigError, match=r"=5000 \(overrides\) would .*: max_gradient_steps=N$"):
        rlblocks.train("td3bc", env="Pendulum-v1", dataset=dataset, run_dir=tmp_path / "a",
                       overrides=[*SMALL, "trainer.max_env_steps=5000"], quiet=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"max_env_steps=5000 \(config\) would be ignored"):
        _train(dataset, tmp_path / "b", config={"trainer": {"max_env_steps": 5000}})
    # a config rlblocks wrote records the unused field at its default: it reads back as it was
    assert cli(common) == 0
    shown = capsys.readouterr().out
    assert json.loads(shown)["trainer"]["max_env_steps"] == 1_000_000
    (tmp_path / "shown.json").write_text(shown)
    assert cli(["train", "td3bc", "--config", str(tmp_path / "shown.json"), "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(shown)
    # a resume: the new budget of a stopped offline run is in gradient steps
    run = tmp_path / "run"
    _train(dataset, run, steps=200, hooks=[StopAt(100)])
    assert cli(["resume", str(run), "--max-env-steps", "500"]) == 2
    err = capsys.readouterr().err
    assert "trainer.max_env_steps=500 (--max-env-steps or --set) would be ignored" in err
    assert err.rstrip().endswith("--max-gradient-steps N")
    with pytest.raises(ConfigError, match=r": overrides=\['trainer\.max_gradient_steps=N'\]$"):
        rlblocks.resume(run, overrides=["trainer.max_env_steps=500"])
    assert json.loads((run / "result.json").read_text())["gradient_steps"] == 100  # untouched
    # the online counterpart: a gradient-step budget set for an online algorithm is refused too
    online = ["train", "td3", "--env", "Pendulum-v1", "--dry-run"]
    assert cli([*online, "--set", "trainer.max_gradient_steps=10"]) == 2
    assert "$.trainer.max_gradient_steps: algo 'td3' trains off-policy" in capsys.readouterr().err
    toml.write_text("[trainer]\nmax_gradient_steps = 10\n")
    assert cli([*online, "--config", str(toml)]) == 2
    assert "$.trainer.max_gradient_steps: algo 'td3' trains off-policy" in capsys.readouterr().err


def test_tune_searches_an_offline_algorithm_on_a_dataset_in_gradient_steps(
    dataset: Path, tmp_path: Path, capsys
) -> None:
    optuna = pytest.importorskip("optuna")
    from rlblocks.cli import main as cli

    root = tmp_path / "tune"
    sets = [a for item in SMALL for a in ("--set", item)]
    common = ["tune", "td3bc", "--env", "Pendulum-v1", "--trials", "1", "--run-dir", str(root)]
    assert cli([*common, "--dataset", str(dataset), "--max-gradient-steps", "200",
                "--param", "algo.actor_lr=loguniform:1e-4:1e-3", *sets]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "trial 0: done" in out and "200 gradient steps" in out
    trial = json.loads((root / "trial-0" / "config.json").read_text())
    assert trial["trainer"]["max_gradient_steps"] == 200
    assert trial["buffer"]["dataset"] == str(dataset.resolve())
    # Optuna hears each test at its gradient step (an offline run's env step stays 0)
    study = optuna.load_study(study_name="td3bc-Pendulum-v1",
                              storage=f"sqlite:///{(root / 'study.db').resolve()}")  # fmt: skip
    assert sorted(study.trials[0].intermediate_values) == [100, 200]
    best = (root / "best.toml").read_text()
    assert "trainer.max_gradient_steps = 200; train longer with --max-gradient-steps N" in best
    assert "max_env_steps" not in best
    assert cli(["train", "td3bc", "--config", str(root / "best.toml"), "--dry-run"]) == 0
    passed_back = json.loads(capsys.readouterr().out)
    assert passed_back["trainer"]["max_gradient_steps"] == 200
    assert passed_back["buffer"]["dataset"] == str(dataset.resolve())
    # the mix-ups train refuses are refused before the study, by the flag or field typed
    refused = tmp_path / "refused"
    mixups = [
        (["td3bc", "--dataset", str(dataset), "--max-env-steps", "200"], "--max-gradient-steps N"),
        (["td3bc", "--dataset", str(dataset), "--set", "trainer.max_env_steps=200"],
         "trainer.max_env_steps=200 (--set) would be ignored"),
        (["td3bc", "--max-gradient-steps", "200", "--set", "trainer.max_gradient_steps=100"],
         "pass --max-gradient-steps or --set trainer.max_gradient_steps=..., not both"),
        (["td3bc"], "pass --dataset FILE"),
        (["td3", "--max-gradient-steps", "200"], "$.trainer.max_gradient_steps: algo 'td3'"),
        (["td3", "--dataset", str(dataset)], "$.buffer.dataset: algo 'td3' trains off-policy"),
    ]  # fmt: skip
    for argv, message in mixups:
        assert cli(["tune", *argv, "--env", "Pendulum-v1", "--run-dir", str(refused)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, argv
    assert not refused.exists()  # no study, no failed trial


def test_screened_tests_of_an_offline_run_are_recorded_at_env_step_0(
    dataset: Path, tmp_path: Path
) -> None:
    # an unreachable stop reward: every test but the last is cut short by its screen, and each
    # tests.csv row, screened or not, says env step 0 and the gradient step it ran at
    over = [*SMALL, "trainer.test_screen_episodes=1", "trainer.test_episodes=4",
            "env.num_test_envs=2"]  # fmt: skip
    run = tmp_path / "run"
    rlblocks.train("td3bc", dataset=str(dataset), max_gradient_steps=300, stop_reward=1e6,
                   overrides=over, loggers=[], progress=False, run_dir=run)  # fmt: skip
    from rlblocks.run import read_tests

    rows = read_tests(run)
    assert [r["screen"] for r in rows] == [1, 1, 0]
    assert [r["env_step"] for r in rows] == [0, 0, 0]
    assert [r["gradient_steps"] for r in rows] == [100, 200, 300]
