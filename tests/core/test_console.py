"""The terminal reporter's closing summary."""

from __future__ import annotations

import io

from rlblocks.trainers import ConsoleReporter


def _summary(result: dict) -> str:
    out = io.StringIO()
    ConsoleReporter(1000, progress=True, stream=out).rlblocks_run_end(result=result, run_dir=None)
    return out.getvalue()


def test_summary_names_the_best_test_or_says_none_finished() -> None:
    base = {"solved": False, "stop_reason": "interrupted by SIGINT", "env_steps": 6712,
            "gradient_steps": 5712, "wall_seconds": 21.9}  # fmt: skip
    text = _summary({**base, "best_test_return": None})
    assert text.startswith("stopped: interrupted by SIGINT\n")
    assert "no full test yet, 6712 env steps, 5712 gradient steps, 21.9 s" in text
    assert "None" not in text
    text = _summary({**base, "solved": True, "best_test_return": -148.1349})
    assert text.startswith("solved: ") and "best test return -148.13, 6712 env steps" in text


def test_summary_shows_where_the_time_went_in_one_line() -> None:
    result = {"solved": False, "stop_reason": "reached max_gradient_steps=300", "env_steps": 0,
              "gradient_steps": 300, "wall_seconds": 2.0, "best_test_return": -1.0,
              "collect_seconds": 0.0, "update_seconds": 1.5, "test_seconds": 0.25,
              "collect_speed": 0.0, "update_speed": 200.0, "test_speed": 1600.0}  # fmt: skip
    lines = _summary(result).splitlines()
    # an offline run never collects: no collect part; the rest of the wall time is "other"
    assert lines[2] == (
        "  time: update 1.5 s (200 gradient steps/s), test 0.2 s (1,600 env steps/s), other 0.2 s"
    )
    online = {**result, "collect_seconds": 1.0, "collect_speed": 3000.0, "wall_seconds": 3.0}
    assert "time: collect 1.0 s (3,000 env steps/s), update 1.5 s" in _summary(online)
    # a result written before the split existed shows no time line
    old = {k: v for k, v in result.items() if not k.endswith(("_seconds", "_speed"))}
    assert "time:" not in _summary({**old, "wall_seconds": 2.0})


# -- the progress line (issue 57: telemetry) ----------------------------------------------------


class _Trainer:
    """What the reporter reads of a trainer: its log interval and progress."""

    log_interval = 500
    progress = 0


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _feed(reporter: ConsoleReporter) -> list[str]:
    """A short run's hooks, as the trainer calls them, through ``reporter``'s plain lines."""
    import numpy as np

    trainer = _Trainer()
    config = {"algo_name": "dqn", "env": {"id": "CartPole-v1"}, "trainer": {"stop_reward": 200}}
    reporter.rlblocks_run_start(config=config, run_dir=None, resumed=False)
    reporter.rlblocks_rollout_end(stats={"n_step": 100}, env_step=100, trainer=trainer)
    # 25 episodes: the line shows the mean of the last 20 (returns 6..25 -> 15.5)
    # (hooks are called with the arguments their implementation takes, as pluggy does)
    reporter.rlblocks_episodes_end(returns=np.arange(1.0, 26.0), env_step=600, namespace="train")
    reporter.rlblocks_episodes_end(returns=np.array([999.0]), env_step=600, namespace="test")
    update = {"loss/actor": -3.0, "loss/critic": 0.25, "gradient_step": 10}
    reporter.rlblocks_update_end(stats=update, gradient_step=10, trainer=trainer)
    reporter.rlblocks_rollout_end(stats={"n_step": 500}, env_step=600, trainer=trainer)
    reporter.rlblocks_test_end(stats={"return_mean": 20.0, "return_std": 2.0, "n_episode": 3,
                                      "best_return": float("-inf"), "screened": True},
                               env_step=600, trainer=trainer)  # fmt: skip
    reporter.rlblocks_test_end(stats={"return_mean": 150.0, "return_std": 5.0, "n_episode": 10,
                                      "best_return": 150.0, "screened": False},
                               env_step=1000, trainer=trainer)  # fmt: skip
    return reporter.stream.getvalue().splitlines()


def test_plain_lines_show_training_return_loss_and_each_test_screened_or_full() -> None:
    lines = _feed(ConsoleReporter(2000, stream=io.StringIO()))
    assert lines[0] == "training dqn on CartPole-v1 for 2,000 env steps"
    # a line per log interval (500 env steps): the first collect, then the one past 500
    assert lines[1] == "env step 100/2,000: no episode yet"
    assert lines[2].startswith(
        "env step 600/2,000: train return 15.5 (last 20 episodes), loss/critic 0.25, "
    )
    assert "env steps/s, budget ETA " in lines[2]
    # a line per test; a screened one says so, and what it skipped
    assert lines[3].startswith(
        "env step 600/2,000: screened test return 20.0 +- 2.0 over 3 episodes (no full test "
        "yet); below stop_reward 200 by a clear margin, so the full test was skipped"
    )
    assert lines[4].startswith(
        "env step 1,000/2,000: test return 150.0 +- 5.0 over 10 episodes (best 150.0)"
    )
    assert len(lines) == 5


def test_plain_mode_on_a_terminal_only_when_asked(monkeypatch) -> None:
    monkeypatch.delenv("RLBLOCKS_PLAIN", raising=False)
    assert not ConsoleReporter(100, stream=_Tty()).lines  # a terminal gets the bar
    assert ConsoleReporter(100, stream=_Tty(), plain=True).lines
    monkeypatch.setenv("RLBLOCKS_PLAIN", "1")  # what --plain sets
    assert ConsoleReporter(100, stream=_Tty()).lines
    assert not ConsoleReporter(100, stream=_Tty(), progress=False).lines


def test_main_loss_prefers_the_loss_then_the_critics() -> None:
    from rlblocks.trainers import main_loss

    assert main_loss({"loss": 1.5, "loss/critic": 2.0}) == ("loss", 1.5)
    assert main_loss({"loss/actor": -9.0, "loss/critic": 2.0}) == ("loss/critic", 2.0)
    assert main_loss({"loss/vf": 0.5, "loss/clip": 0.1}) == ("loss/clip", 0.1)
    assert main_loss({"loss/kl": 0.3, "loss/bc": 0.2}) == ("loss/bc", 0.2)
    assert main_loss({"q_mean": 3.0}) is None


def test_threshold_trend_extrapolates_a_rising_line_and_stays_silent_otherwise() -> None:
    from rlblocks.trainers import threshold_trend

    rising = [(1000, 100.0), (2000, 150.0), (3000, 200.0)]  # 50 per 1000 steps
    assert threshold_trend(rising, 475.0, 100_000) == 8500.0
    assert threshold_trend(rising, 475.0, 8000) is None  # beyond the budget: the budget ETA
    assert threshold_trend(rising[:2], 475.0, 100_000) is None  # too few tests
    assert threshold_trend([(1, 5.0), (2, 4.0), (3, 3.0)], 10.0, 100) is None  # falling
    assert threshold_trend(rising, None, 100_000) is None  # no stop reward
    assert threshold_trend(rising, 150.0, 100_000) is None  # already past it


def _end(result: dict, run_dir, **kwargs) -> str:
    out = io.StringIO()
    ConsoleReporter(1000, stream=out, **kwargs).rlblocks_run_end(result=result, run_dir=run_dir)
    return out.getvalue()


def test_continue_line_is_valid_quoted_and_absent_after_solved(tmp_path) -> None:
    import ast
    import shlex

    run = tmp_path / "my runs" / "x"
    base = {"stop_reason": "", "env_steps": 1000, "gradient_steps": 10, "wall_seconds": 1.0,
            "best_test_return": 10.0}  # fmt: skip
    assert "continue it" not in _end({**base, "solved": True}, run)
    # the budget was spent: the command gives a larger one; the path is shell-quoted
    text = _end({**base, "solved": False}, run)
    line = next(x for x in text.splitlines() if "continue it:" in x).split("continue it: ")[1]
    assert shlex.split(line) == ["rlblocks", "resume", str(run), "--max-env-steps", "2000"]
    # interrupted before the budget: resume as it is
    text = _end({**base, "solved": False, "env_steps": 400}, run)
    line = next(x for x in text.splitlines() if "continue it:" in x).split("continue it: ")[1]
    assert shlex.split(line) == ["rlblocks", "resume", str(run)]
    # a run from a Python env factory (a lambda): valid Python with a named placeholder
    text = _end({**base, "solved": False, "env_steps": 400}, run,
                env_factory="__main__:<lambda>", networks={"model": "mod:Net"})  # fmt: skip
    line = next(x for x in text.splitlines() if "continue it:" in x).split("continue it: ")[1]
    code, _, note = line.partition("  # ")
    ast.parse(code)
    assert code == f"rlblocks.resume({str(run)!r}, env=make_env, networks={{'model': Net}})"
    assert "make_env: the env factory the run trained with (__main__:<lambda>)" in note
