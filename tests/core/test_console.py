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
