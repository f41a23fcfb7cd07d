"""The ``rlblocks`` command: listing stays light, train/resume pass through, errors are short."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from rlblocks.cli import main
from rlblocks.contracts import UnknownComponentError


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_list_shows_the_replay_buffer_without_importing_torch():
    proc = run_python(
        "import sys\n"
        "from rlblocks.cli import main\n"
        "rc = main(['list', '--details'])\n"
        "print('TORCH_IMPORTED', 'torch' in sys.modules)\n"
        "sys.exit(rc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[0].split() == ["NAME", "KIND", "DISTRIBUTION", "VERSION", "SUMMARY"]
    (replay,) = [r for r in rows if r.startswith("replay ")]
    assert replay.split()[1:3] == ["buffer", "rlblocks"]
    assert "TORCH_IMPORTED False" in rows, "listing plugins must not import torch"


def test_python_m_rlblocks_cli_runs_the_command():
    proc = subprocess.run(
        [sys.executable, "-m", "rlblocks.cli", "list", "buffers", "--details"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "replay" in proc.stdout
    assert "part: layout" in proc.stdout
    assert "config: rlblocks.replay._specs:SequenceConfig" in proc.stdout


def test_list_of_one_kind_shows_only_that_kind(capsys):
    assert main(["list", "buffer"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows and all(row.split()[1] == "buffer" for row in rows if not row.startswith(" "))


@pytest.fixture
def fake_experiment(monkeypatch):
    """Stand-in for rlblocks.run that records how the CLI called it."""
    module = types.SimpleNamespace(calls=[])

    def train(algo, **kwargs):
        module.calls.append(("train", algo, kwargs))
        if algo == "nope":
            raise UnknownComponentError("no algo named 'nope'.\nInstalled algos: dqn")
        return {"solved": False, "best_test_return": 12.5, "env_steps": 1000}

    def resume(run_dir, overrides=(), trust_imports=False, continue_solved=False):
        module.calls.append(("resume", run_dir, list(overrides)))
        module.continue_solved = continue_solved
        return {"solved": True}

    import rlblocks.run

    monkeypatch.setattr(rlblocks.run, "train", train)
    monkeypatch.setattr(rlblocks.run, "resume", resume)
    return module


def test_train_passes_every_option_through_and_returns_0_when_not_solved(fake_experiment):
    argv = [
        "train", "dqn", "--env", "CartPole-v1", "--seed", "3", "--stop-reward", "195",
        "--backend", "dummy", "--buffer", "replay", "--num-envs", "4",
        "--logger", "mlflow", "--logger", "csv", "--config", "cfg.toml",
        "--set", "trainer.lr=0.001", "--set", "algo.gamma=0.9", "--run-dir", "runs/x",
        "--device", "cpu", "--no-progress", "--max-env-steps", "3e4",
        "--max-gradient-steps", "1e3", "--dataset", "data.h5",
    ]
    assert main(argv) == 0
    (call,) = fake_experiment.calls
    assert call == ("train", "dqn", {
        "env": "CartPole-v1", "seed": 3, "stop_reward": 195.0, "backend": "dummy",
        "buffer": "replay", "num_envs": 4,
        # --logger adds to the default loggers; one of them named again is not doubled
        "loggers": ["tensorboard", "csv", "mlflow"],
        "config": Path("cfg.toml"), "overrides": ["trainer.lr=0.001", "algo.gamma=0.9"],
        "run_dir": Path("runs/x"), "device": "cpu", "progress": False, "overwrite": False,
        "max_env_steps": 30_000, "max_gradient_steps": 1_000, "dataset": "data.h5",
        "init_from": None, "init_buffer": False, "trust_imports": False,
    })


def test_train_leaves_unset_options_to_the_experiment(fake_experiment):
    assert main(["train", "dqn"]) == 0
    (_, _, kwargs) = fake_experiment.calls[0]
    assert kwargs["loggers"] is None and kwargs["env"] is None and kwargs["config"] is None
    assert kwargs["overrides"] == [] and kwargs["progress"] is None
    assert kwargs["max_env_steps"] is None
    assert kwargs["max_gradient_steps"] is None and kwargs["dataset"] is None


def test_resume_passes_the_run_directory(fake_experiment):
    assert main(["resume", "runs/x", "--set", "trainer.max_env_steps=100"]) == 0
    assert fake_experiment.calls == [("resume", Path("runs/x"), ["trainer.max_env_steps=100"])]
    assert fake_experiment.continue_solved is False  # a solved run is refused unless asked
    assert main(["resume", "runs/x", "--continue-solved"]) == 0
    assert fake_experiment.continue_solved is True


def test_resume_takes_a_new_budget_as_the_budget_field(fake_experiment):
    assert main(["resume", "runs/x", "--max-env-steps", "2e5", "--set", "algo.tau=0.01"]) == 0
    assert fake_experiment.calls == [
        ("resume", Path("runs/x"), ["algo.tau=0.01", "trainer.max_env_steps=200000"])
    ]


def test_resume_takes_a_new_gradient_step_budget_as_its_field(fake_experiment):
    assert main(["resume", "runs/x", "--max-gradient-steps", "1e5"]) == 0
    assert fake_experiment.calls == [
        ("resume", Path("runs/x"), ["trainer.max_gradient_steps=100000"])
    ]


def test_rlblocks_error_prints_one_message_and_exits_2(fake_experiment, capsys):
    assert main(["train", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no algo named 'nope'.")
    assert "Traceback" not in err


def test_debug_shows_the_traceback(fake_experiment, capsys):
    assert main(["train", "nope", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "error: no algo named 'nope'." in err


def test_malformed_override_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "dqn", "--set", "lr=0.1"])
    assert info.value.code == 2
    assert "section.field=value" in capsys.readouterr().err
