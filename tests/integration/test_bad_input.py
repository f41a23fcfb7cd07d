"""Bad input, as a hostile user gives it: every case is a one-line error naming the field or the
problem (``rlblocks train`` exits with 2), and an rlblocks error type from ``rlblocks.train``;
never a traceback, a silent run, or a run that trains on NaN."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import CheckpointError, ConfigError, EnvWorkerError, NonFiniteError
from rlblocks.plugins import hookimpl

QUIET = ["--no-progress", "--set", "run.loggers=[]"]
#: a short run that tests only at its end
SHORT = [
    "trainer.max_env_steps=400",
    "trainer.warmup_steps=64",
    "trainer.test_interval=10000",
    "trainer.test_episodes=2",
    "env.num_envs=2",
    "env.num_test_envs=2",
]


def _cli_error(capsys, args: list[str]) -> str:
    """Run the command; it must exit with 2 and write exactly one line to stderr."""
    capsys.readouterr()  # forget what earlier steps of the test printed
    code = cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0].removeprefix("error: ")


def _sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


# -- values out of range, rejected when the config is built ------------------------------------

CONFIG_CASES = [
    ("dqn", ["algo.tau=-1"], None, "$.algo.tau: must be in (0, 1] or None (hard copies), got -1.0"),
    ("dqn", ["algo.tau=1.5"], None, "$.algo.tau: must be in (0, 1]"),
    ("dqn", ["algo.activation=relux"], None, "$.algo.activation: unknown value 'relux'; did you"),
    ("dqn", ["algo.hidden_sizes=[-5]"], None, "$.algo.hidden_sizes: must be a list of layer"),
    ("dqn", ["algo.hidden_sizes=[0]"], None, "widths, each an int >= 1 (e.g. [64, 64]), got [0]"),
    ("dqn", ["algo.hidden_sizes=[64, 2.5]"], None, "$.algo.hidden_sizes[1]: expected int, got 2.5"),
    ("dqn", ["algo.eps_start=1.5"], None, "$.algo.eps_start: must be in [0, 1], got 1.5"),
    ("dqn", ["algo.eps_end=-0.1"], None, "$.algo.eps_end: must be in [0, 1], got -0.1"),
    ("dqn", ["algo.eps_test=2"], None, "$.algo.eps_test: must be in [0, 1], got 2.0"),
    ("dqn", ["algo.gamma=1.5"], None, "$.algo.gamma: must be in [0, 1], got 1.5"),
    ("dqn", ["algo.lr=0"], None, "$.algo.lr: must be a finite number > 0, got 0.0"),
    ("dqn", ["algo.lr=inf"], None, "$.algo.lr: must be a finite number > 0, got inf"),
    ("dqn", ["algo.max_grad_norm=-1"], None, "$.algo.max_grad_norm: must be a finite number > 0"),
    ("dqn", [], "nan", "$.trainer.stop_reward: must be a finite number or None"),
    ("dqn", ["buffer.size=2.7"], None, "$.buffer.size: expected int, got 2.7"),
    ("dqn", ["buffer.size=0"], None, "$.buffer.size: must be an int >= 1, got 0"),
    ("dqn", ["trainer.batch_size=0"], None, "$.trainer.batch_size: must be an int >= 1, got 0"),
    (
        "dqn",
        ["trainer.max_env_steps=1000", "trainer.step_per_collect=5000", "trainer.warmup_steps=0"],
        None,
        "$.trainer.step_per_collect: 5000 exceeds trainer.max_env_steps=1000, so the run would "
        "overshoot its budget",
    ),
    ("dqn", ["trainer.on_nonfinite=skip"], None, "did you mean 'skip_update'?"),
    (
        "dqn",
        ["trainer.max_env_steps=500", "trainer.warmup_steps=500"],
        None,
        "$.trainer.warmup_steps: 500 leaves no env step of trainer.max_env_steps=500 for learning",
    ),
    ("sac", ["algo.tau=-1"], None, "$.algo.tau: must be in (0, 1], got -1.0"),
    ("sac", ["algo.log_std_max=-30"], None, "$.algo.log_std_max: must be > log_std_min=-20.0"),
    ("sac", ["algo.actor_lr=-0.001"], None, "$.algo.actor_lr: must be a finite number > 0"),
    ("ppo", ["algo.activation=Tanh"], None, "did you mean 'tanh'?"),
    ("ppo", ["algo.gae_lambda=2"], None, "$.algo.gae_lambda: must be in [0, 1], got 2.0"),
    ("redq", ["algo.subset_size=20"], None, "$.algo.subset_size: 20 exceeds ensemble_size=10"),
    # more threads than cores: torch would exhaust the process's threads and segfault
    ("dqn", ["run.torch_threads=100000"], None, "$.run.torch_threads: 100000 is more than the"),
    ("dqn", ["env.worker_timeout=0"], None, "worker_timeout must be a positive number"),
]  # fmt: skip


@pytest.mark.parametrize(("algo", "overrides", "stop_reward", "said"), CONFIG_CASES)
def test_a_value_out_of_range_is_one_line_naming_its_field(
    algo, overrides, stop_reward, said, capsys, tmp_path: Path
) -> None:
    args = ["train", algo, "--run-dir", str(tmp_path / "run"), *QUIET, *_sets(overrides)]
    if stop_reward is not None:
        args += ["--stop-reward", stop_reward]
    assert said in _cli_error(capsys, args)
    with pytest.raises(ConfigError) as caught:
        rlblocks.train(
            algo,
            overrides=overrides,
            stop_reward=float(stop_reward) if stop_reward is not None else None,
            run_dir=tmp_path / "run",
            progress=False,
            loggers=[],
        )
    assert said in str(caught.value)
    assert not (tmp_path / "run").exists()  # refused before anything was built


# -- an env that returns NaN --------------------------------------------------------------------

NAN_ENV_MODULE = '''
import gymnasium as gym


class NanRewardOnce(gym.Wrapper):
    """Returns NaN as the reward of its 30th step."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        obs, rew, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.steps == 30 else rew, terminated, truncated, info
'''


@pytest.fixture
def nan_env_module(tmp_path: Path, monkeypatch) -> str:
    name = f"nan_envs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(NAN_ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_an_env_returning_a_nan_reward_stops_the_run_naming_the_env(
    nan_env_module: str, capsys, tmp_path: Path
) -> None:
    wrappers = f'env.wrappers=["{nan_env_module}:NanRewardOnce"]'
    args = ["train", "dqn", "--run-dir", str(tmp_path / "cli"), *QUIET, *_sets([*SHORT, wrappers])]
    said = _cli_error(capsys, args)
    assert said.startswith("env 'CartPole-v1' at index 0")
    assert "returned the reward nan from step()" in said

    module = __import__(nan_env_module)
    with pytest.raises(NonFiniteError, match=r"env 'CartPole-v1' at index \d.* reward nan"):
        rlblocks.train(
            "dqn",
            env=lambda: module.NanRewardOnce(gym.make("CartPole-v1")),
            overrides=SHORT,
            run_dir=tmp_path / "api",
            progress=False,
            loggers=[],
        )


# -- a loss that goes NaN -----------------------------------------------------------------------


def test_a_nan_loss_stops_the_run_with_the_gradient_and_env_step(capsys, tmp_path: Path) -> None:
    overrides = [*SHORT, "algo.lr=1e30"]  # the first step throws the weights to ~1e30
    said = _cli_error(
        capsys, ["train", "dqn", "--run-dir", str(tmp_path / "cli"), *QUIET, *_sets(overrides)]
    )
    assert said.startswith("the loss of optimizer 'q' is nan at gradient step ")
    assert "(env step " in said and "trainer.on_nonfinite=skip_update" in said

    said = r"^the loss of optimizer 'q' is nan at gradient step \d+ \(env step \d+\); no checkpoint"
    with pytest.raises(NonFiniteError, match=said):
        rlblocks.train(
            "dqn", overrides=overrides, run_dir=tmp_path / "api", progress=False, loggers=[]
        )


def test_skip_update_trains_on_past_nan_losses_with_finite_weights(tmp_path: Path) -> None:
    skipped: list[int] = []

    class Skips:
        @hookimpl
        def rlblocks_update_end(self, stats, env_step, gradient_step):
            skipped.append(stats["skipped_steps"])

    result = rlblocks.train(
        "dqn",
        overrides=[*SHORT, "algo.lr=1e30", "trainer.on_nonfinite=skip_update"],
        run_dir=tmp_path / "run",
        progress=False,
        loggers=[],
        hooks=[Skips()],
    )
    assert result.env_steps >= 400 and sum(skipped) > 0
    policy = result.agent.policy
    assert all(bool(torch.isfinite(p).all()) for p in policy.parameters())
    assert math.isfinite(result.last_test_return)


# -- cases whose fix lies outside core's update path ---------------------------------------------


def test_resuming_with_a_changed_architecture_is_one_line(capsys, tmp_path: Path) -> None:
    run = tmp_path / "run"
    rlblocks.train("dqn", overrides=[*SHORT, "algo.hidden_sizes=[16]"], run_dir=run,
                   progress=False, loggers=[], quiet=True)  # fmt: skip
    args = ["resume", str(run), "--set", "algo.hidden_sizes=[32]",
            "--set", "trainer.max_env_steps=800"]  # fmt: skip
    said = _cli_error(capsys, args)
    assert "does not fit" in said
    with pytest.raises(CheckpointError):
        rlblocks.resume(run, overrides=["algo.hidden_sizes=[32]", "trainer.max_env_steps=800"])


WRONG_SHAPE_MODULE = '''
import gymnasium as gym
import numpy as np


class OneTooMany(gym.ObservationWrapper):
    """Observations one entry longer than the observation space says."""

    def observation(self, obs):
        return np.concatenate([obs, [0.0]]).astype(np.float32)
'''


@pytest.mark.parametrize("backend", ["shmem", "subproc", "dummy"])
def test_an_observation_of_the_wrong_shape_is_one_line_naming_the_env(
    capsys, tmp_path: Path, monkeypatch, backend: str
) -> None:
    name = f"shape_envs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(WRONG_SHAPE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        overrides = [*SHORT, f'env.wrappers=["{name}:OneTooMany"]']
        args = ["train", "dqn", "--backend", backend, "--run-dir", str(tmp_path / "run"),
                *QUIET, *_sets(overrides)]  # fmt: skip
        said = _cli_error(capsys, args)
        assert "CartPole-v1" in said and "(5,)" in said and "(4,)" in said
        with pytest.raises(EnvWorkerError):
            rlblocks.train("dqn", backend=backend, overrides=overrides,
                           run_dir=tmp_path / "api", progress=False, loggers=[])  # fmt: skip
    finally:
        sys.modules.pop(name, None)


def test_a_recurrent_algorithm_on_a_buffer_without_sequences_is_refused_by_field(
    tmp_path: Path,
) -> None:
    import attrs

    from rlblocks.plugins import get_registry

    dqn = get_registry("algo").spec("dqn")
    recurrent = attrs.evolve(dqn, name="dqn-recurrent-test", recurrent=True)
    with get_registry("algo").scoped() as registry:
        registry.add(recurrent)
        with pytest.raises(ConfigError, match=r"\$\.buffer\.sampler: .*buffer\.sampler=sequence"):
            rlblocks.train("dqn-recurrent-test", overrides=[*SHORT, "run.loggers=[]"],
                           run_dir=tmp_path / "a")
        # with a sequence sampler the run is built and collects (no updates: DQN itself
        # learns from transitions, it only stands in for a recurrent algorithm here)
        result = rlblocks.train(
            "dqn-recurrent-test", seed=0, run_dir=tmp_path / "b",
            overrides=[*SHORT, "run.loggers=[]", "buffer.sampler=sequence", "buffer.length=4",
                       "trainer.max_env_steps=128", "trainer.update_per_step=0"],
        )
        assert result.env_steps >= 128 and result.gradient_steps == 0
