"""``rlblocks train ... --dry-run``: the config a run would get, checked and printed; no run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlblocks.cli import main as cli

SMALL = [
    "--set", "trainer.max_env_steps=300",
    "--set", "trainer.warmup_steps=64",
    "--set", "trainer.test_interval=300",
    "--set", "trainer.test_episodes=2",
    "--set", "env.num_test_envs=2",
]  # fmt: skip


def _dry_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert cli(["train", *argv, "--dry-run"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_dry_run_prints_the_config_a_run_records_and_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["dqn", "--env", "CartPole-v1", "--seed", "3", "--num-envs", "2", "--no-progress",
            "--set", "algo.gamma=0.97", "--logger", "csv", *SMALL]  # fmt: skip
    shown = _dry_run(argv, capsys)
    assert list(tmp_path.iterdir()) == [], "a dry run writes nothing"
    assert shown["algo_name"] == "dqn" and shown["algo"]["gamma"] == 0.97
    assert shown["env"]["id"] == "CartPole-v1" and shown["env"]["num_envs"] == 2
    assert shown["run"]["seed"] == 3 and shown["run"]["run_dir"] is None
    # the same flags, trained for real: config.json holds what the dry run printed
    run = tmp_path / "run"
    assert cli(["train", *argv, "--run-dir", str(run)]) == 0
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["run"].pop("run_dir") == str(run)
    shown["run"].pop("run_dir")
    assert recorded == shown


def test_the_printed_config_reads_back_with_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = _dry_run(["sac", "--env", "Pendulum-v1", "--set", "algo.tau=0.01"], capsys)
    saved = tmp_path / "sac.json"
    saved.write_text(json.dumps(shown))
    again = _dry_run(["sac", "--config", str(saved)], capsys)
    assert again == shown and again["algo"]["tau"] == 0.01


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dqn", "--set", "algo.gamm=0.9"], "gamm"),
        (["dqn", "--env", "CartPol-v1"], "unknown gymnasium env id 'CartPol-v1'"),
        (["dqm"], "dqn"),
        (["dqn", "--device", "banana"], "unknown device 'banana'"),
        (["dqn", "--backend", "nosuchbackend"], "nosuchbackend"),
        (["dqn", "--seeds", "0-2"], "leave out --seeds"),
        (["dqn", "--env", "Pendulum-v1"], "supports action spaces ['Discrete'], the env has Box"),
        (["sac", "--env", "CartPole-v1"], "algorithms that accept these spaces: a2c, "),
        (["ppo", "--set", "buffer.stack_num=4"], "trains on-policy"),
        (["mappo", "--env", "CartPole-v1"], "learns from a multi-agent env's global state"),
        (["dqn", "--set", 'env.wrappers=["gymnasium.wrappers:NoSuchWrapper"]'], "NoSuchWrapper"),
        (["dqn", "--logger", "tensorbord"], "Did you mean: tensorboard?"),
        (
            ["dqn", "--logger", "csv", "--set", 'run.logger_options={"csv": {"jsnl": false}}'],
            "jsnl",
        ),
        (["dqn", "--set", 'run.logger_options={"mlflow": {}}'], "not among run.loggers"),
    ],
    ids=[
        "field-typo",
        "env-typo",
        "algo-typo",
        "device",
        "backend",
        "seeds",
        "spaces",
        "spaces-suggest",
        "on-policy-stack",
        "global-state",
        "wrapper",
        "logger-typo",
        "logger-option-typo",
        "logger-options-unused",
    ],
)
def test_dry_run_refuses_what_the_run_would_refuse(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["train", *argv, "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err
    assert "Traceback" not in captured.err


def test_dry_run_refuses_a_run_dir_that_holds_a_run_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert cli(["train", "dqn", "--run-dir", str(run), "--dry-run"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    shown = _dry_run(["dqn", "--run-dir", str(run), "--overwrite"], capsys)
    assert shown["run"]["run_dir"] == str(run)
    assert (run / "config.json").read_text() == "{}", "a dry run changes nothing"


@pytest.mark.parametrize(
    ("algo", "env"), [("ddpg", "CartPole-v1"), ("dqn", "Pendulum-v1"), ("mappo", "CartPole-v1")]
)
def test_describe_of_an_algorithm_refuses_an_env_it_cannot_take_as_train_does(
    algo: str, env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["train", algo, "--env", env, "--dry-run"]) == 2
    refused = capsys.readouterr().err
    assert "spaces" in refused
    assert cli(["describe", algo, "--env", env]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == refused  # the very message train gives
    assert cli(["describe", "ddpg", "--env", "Pendulum-v1"]) == 0  # an env it takes
    assert "values for env Pendulum-v1" in capsys.readouterr().out


def test_describe_of_an_algorithm_on_an_env_that_cannot_be_made_here_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymnasium as gym

    import rlblocks.run._compose

    def missing(env_id: str, **kwargs: object) -> gym.Env:
        raise gym.error.DependencyNotInstalled("MuJoCo is not installed")

    monkeypatch.setattr(rlblocks.run._compose, "make_gym_env", missing)
    # the values are still shown (they need no env), with a line saying what was not checked
    assert cli(["describe", "sac", "--env", "Pendulum-v1"]) == 0
    out = capsys.readouterr().out
    assert "spaces is not checked: MuJoCo is not installed" in out and "[algo]" in out


def test_a_single_agent_env_is_offered_only_algorithms_that_fit_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Pendulum, no dataset: neither multi-agent algorithms nor ones that learn from a dataset
    assert cli(["train", "dqn", "--env", "Pendulum-v1", "--dry-run"]) == 2
    offered = capsys.readouterr().err.split("accept these spaces: ")[1].split(" (")[0].split(", ")
    assert "ppo" in offered and "sac" in offered
    assert "mappo" not in offered, "mappo's centralised critic needs a multi-agent env's state"
    assert "ippo" not in offered, "ippo is for multi-agent envs; Pendulum has one agent"
    for with_dataset in ("td3bc", "cql", "bc", "iql", "awac", "gail"):
        assert with_dataset not in offered, f"{with_dataset} needs a dataset this run lacks"


def test_a_run_with_a_dataset_is_offered_the_algorithms_that_learn_from_one() -> None:
    import gymnasium as gym

    from rlblocks.plugins import get_registry
    from rlblocks.run._compose import _algos_for

    specs = get_registry("algo").loadable_specs()
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    offline = _algos_for(box, box, asked=specs["td3bc"]).split(": ")[1].split(", ")
    online = _algos_for(box, box, asked=specs["sac"]).split(": ")[1].split(", ")
    assert "cql" in offline and "sac" in offline
    assert "cql" not in online and "sac" in online


@pytest.mark.parametrize(
    ("given", "steps"), [("20000", 20_000), ("2e4", 20_000), ("12_000", 12_000)]
)
def test_max_env_steps_sets_the_budget(given: str, steps: int, capsys) -> None:
    shown = _dry_run(["sac", "--env", "Pendulum-v1", "--max-env-steps", given], capsys)
    assert shown["trainer"]["max_env_steps"] == steps
    default = _dry_run(["sac", "--env", "Pendulum-v1"], capsys)["trainer"]["max_env_steps"]
    assert default != steps, "the flag must be what moved the budget"


@pytest.mark.parametrize("given", ["0", "-5", "1.5", "2.5e-1", "many", "nan", "1e400"])
def test_max_env_steps_refuses_what_is_not_a_number_of_steps(given: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["train", "dqn", "--max-env-steps", given, "--dry-run"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{given!r} is not a number of env steps" in err and "2e5" in err


def test_max_env_steps_and_the_same_field_set_are_refused_together(capsys) -> None:
    argv = ["dqn", "--max-env-steps", "500", "--set", "trainer.max_env_steps=300", "--dry-run"]
    assert cli(["train", *argv]) == 2
    assert "pass --max-env-steps or --set trainer.max_env_steps=..., not both" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "runs/x", "--episodes", "0"],
        ["eval", "runs/x", "--video-episodes", "-1"],
        ["tune", "dqn", "--trials", "zero"],
        ["train", "dqn", "--seeds", "0-1", "--workers", "0"],
    ],
)
def test_counts_are_refused_before_anything_loads(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(argv)
    assert exit_info.value.code == 2
    assert "is not a positive integer" in capsys.readouterr().err
