"""Hook objects for tests of runs (resume, loggers, checkpoints under faults)."""

from __future__ import annotations

from typing import Any

from rlblocks.plugins import hookimpl


class CrashAt:
    """Raises ``RuntimeError("simulated crash")`` once a run passes ``step`` env steps: a
    stand-in for a killed job, for tests of resume and of what a failed run leaves behind."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def rlblocks_rollout_end(self, stats: Any, env_step: int) -> None:
        if env_step >= self.step:
            raise RuntimeError("simulated crash")
