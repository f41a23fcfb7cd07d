"""The terminal reporter's closing summary."""

from __future__ import annotations

import io

from rlblocks.console import ConsoleReporter


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
