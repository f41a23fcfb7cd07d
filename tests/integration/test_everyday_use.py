"""Everyday use on small real runs (issue 57): the per-env-step hook and the training
episodes on the result, screened tests counted alike by the hooks, tests.csv and describe, the
refusal to resume a solved run and the commands printed for a run in a folder with a space, a
custom env imported from the current directory, and repeated env.wrappers settings."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import read_tests

SMALL = [
    "trainer.max_env_steps=600",
    "trainer.warmup_steps=96",
    "trainer.test_interval=200",
    "trainer.test_episodes=4",
    "env.num_envs=4",
    "env.num_test_envs=4",
]


class _Steps:
    """Records every rlblocks_env_step call and the collector's callback at each collect."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, float, bool, bool]] = []

    @hookimpl
    def rlblocks_env_step(self, env_step, env_id, obs, act, rew, terminated, truncated,
                          obs_next, info) -> None:  # fmt: skip
        assert np.shape(obs) == (4,) and np.shape(obs_next) == (4,) and int(act) in (0, 1)
        assert isinstance(info, dict)
        self.calls.append((env_step, env_id, float(rew), terminated, truncated))


class _Wired:
    """Sees whether the training collector got a per-step callback."""

    def __init__(self) -> None:
        self.on_step: list[object] = []

    @hookimpl
    def rlblocks_rollout_end(self, trainer) -> None:
        self.on_step.append(trainer.train_collector.on_step)


def test_per_step_hook_once_per_env_step_per_env_and_episodes_on_the_result() -> None:
    steps, wired = _Steps(), _Wired()
    result = rlblocks.train("dqn", env="CartPole-v1", seed=0, overrides=SMALL, progress=False,
                            loggers=[], hooks=[steps, wired])  # fmt: skip
    n = result.env_steps
    assert len(steps.calls) == n  # the warm-up's random steps included
    assert sorted(c[0] for c in steps.calls) == list(range(1, n + 1))
    per_env = np.bincount([c[1] for c in steps.calls], minlength=4)
    assert per_env.tolist() == [n // 4] * 4
    assert all(w is not None for w in wired.on_step)
    # the episodes the hook saw end are the result's, with the same returns and lengths
    running = np.zeros(4)
    length = np.zeros(4, dtype=int)
    seen_returns, seen_lengths = [], []
    for _step, env, rew, terminated, truncated in sorted(steps.calls):
        running[env] += rew
        length[env] += 1
        if terminated or truncated:
            seen_returns.append(running[env])
            seen_lengths.append(length[env])
            running[env], length[env] = 0.0, 0
    assert len(result.train_episode_returns) == result.train_episodes == len(seen_returns) > 5
    assert sorted(result.train_episode_returns) == sorted(seen_returns)
    assert sorted(result.train_episode_lengths) == sorted(seen_lengths)
    ends = result.train_episode_env_steps
    assert ends == sorted(ends) and ends[0] > 0 and ends[-1] <= n
    assert "train_episode_returns" not in result.to_dict()  # result.json stays small
    # nobody implements it: the collector gets no callback at all
    wired = _Wired()
    rlblocks.train("dqn", env="CartPole-v1", seed=0, overrides=SMALL, progress=False,
                   loggers=[], hooks=[wired])  # fmt: skip
    assert wired.on_step and all(w is None for w in wired.on_step)


def test_screened_tests_count_for_hooks_tests_csv_and_describe(tmp_path: Path, capsys) -> None:
    class Ends:
        def __init__(self) -> None:
            self.screened: list[bool] = []
            self.asked = 0

        @hookimpl
        def rlblocks_test_end(self, stats) -> None:
            self.screened.append(bool(stats["screened"]))

        @hookimpl
        def rlblocks_should_stop(self, state) -> None:
            self.asked += 1

    ends, run = Ends(), tmp_path / "screens"
    # an unreachable stop reward: each scheduled test ends on its 2-episode screen
    rlblocks.train("dqn", env="CartPole-v1", seed=0, run_dir=run, progress=False, loggers=[],
                   hooks=[ends], overrides=[*SMALL, "trainer.stop_reward=1e9",
                                            "trainer.test_screen_episodes=2"])  # fmt: skip
    rows = read_tests(run)
    assert [bool(r["screen"]) for r in rows] == ends.screened
    assert ends.screened.count(True) >= 2 and ends.screened[-1] is False
    assert ends.asked >= len(rows)
    assert cli(["describe", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    screened = ends.screened.count(True)
    assert f"tests: {len(rows)} ({screened} screened: ended after their first episodes" in out


def test_resume_refuses_a_solved_run_and_prints_quoted_commands(tmp_path: Path, capsys) -> None:
    run = tmp_path / "my runs" / "solved"
    sets = [*SMALL, "trainer.stop_reward=5", "trainer.max_env_steps=2000"]
    result = rlblocks.train("dqn", env="CartPole-v1", seed=0, run_dir=run, loggers=[],
                            overrides=sets)  # fmt: skip
    assert result.solved and result.env_steps < 2000
    summary = capsys.readouterr()
    assert "solved:" in summary.err and "continue it" not in summary.err
    with pytest.raises(ConfigError, match=r"is solved .*continue_solved=True"):
        rlblocks.resume(run)
    assert cli(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    command = err.split("to train it further anyway: ")[1].strip()
    assert shlex.split(command) == ["rlblocks", "resume", str(run), "--continue-solved"]
    # asked to: it trains on (and, solved again at its first test, stops there)
    again = rlblocks.resume(run, continue_solved=True)
    assert again.env_steps > result.env_steps and again.solved


def test_custom_env_module_from_the_current_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "uxmod_pole.py").write_text(
        "import gymnasium as gym\n"
        "from gymnasium.envs.classic_control import CartPoleEnv\n"
        "gym.register('UxPole-v0', entry_point=CartPoleEnv, max_episode_steps=100)\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "uxmod_pole", raising=False)
    sets = [arg for s in SMALL for arg in ("--set", s)]
    assert cli(["train", "dqn", "--env", "uxmod_pole:UxPole-v0", "--run-dir", "my run",
                "--no-progress", "--logger", "csv", *sets]) == 0  # fmt: skip
    assert "uxmod_pole" in sys.modules
    capsys.readouterr()
    # another process (here: the module forgotten) evaluating the run directory must not
    # import it on the run's word; the refusal gives the exact command that trusts it
    monkeypatch.delitem(sys.modules, "uxmod_pole")
    assert cli(["eval", "my run", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    command = err.split("run the command again with --trust-imports: ")[1].strip()
    assert shlex.split(command) == ["rlblocks", "eval", "my run", "--episodes", "1",
                                    "--trust-imports"]  # fmt: skip
    assert cli(shlex.split(command)[1:]) == 0


def test_repeated_wrapper_settings_add_up_and_an_unquoted_array_gets_the_hint() -> None:
    from rlblocks.run import build_config, spec_lookup

    a, b = "gymnasium.wrappers:TimeAwareObservation", "gymnasium.wrappers:RecordEpisodeStatistics"
    config = build_config("dqn", overrides=[f'env.wrappers=["{a}"]', f'env.wrappers=["{b}"]'],
                          spec_lookup=spec_lookup)  # fmt: skip
    assert config.env.wrappers == [a, b]
    # a config file's wrappers are replaced by the first setting, as any field's
    config = build_config("dqn", file_data={"env": {"wrappers": [b]}},
                          overrides=[f'env.wrappers=["{a}"]'], spec_lookup=spec_lookup)  # fmt: skip
    assert config.env.wrappers == [a]
    with pytest.raises(ConfigError) as err:  # the shell ate the inner quotes
        build_config("dqn", overrides=[f"env.wrappers=[{a}]"], spec_lookup=spec_lookup)
    assert f"""--set 'env.wrappers=["{a}"]'""" in str(err.value)


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path: Path, monkeypatch) -> None:
    """A run nobody named is not refused as a resume because another began in the same second
    (the clock is frozen here, so every call sees one stamp)."""
    import datetime as dt

    from rlblocks.run import _rundir

    class _Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 7, 12, 0, 0)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_rundir._dt, "datetime", _Frozen)
    tiny = [*SMALL[1:], "trainer.max_env_steps=200"]
    first = rlblocks.train("dqn", env="CartPole-v1", seed=0, progress=False, loggers=[],
                           overrides=tiny)  # fmt: skip
    second = rlblocks.train("dqn", env="CartPole-v1", seed=1, progress=False, loggers=[],
                            overrides=tiny)  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == ["dqn-CartPole-v1-20261207-120000", "dqn-CartPole-v1-20261207-120000-2"]
    assert first.run_dir != second.run_dir
    for name in names:
        assert (tmp_path / "runs" / name / "config.json").is_file()
    # a folder reserved by hand (or by another process) is skipped as well
    (tmp_path / "runs" / "dqn-CartPole-v1-20261207-120000-3").mkdir()
    assert _rundir.default_run_dir("dqn", "CartPole-v1").name.endswith("-120000-4")
