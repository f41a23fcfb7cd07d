"""The training loops: on-policy, off-policy and offline trainers over a collector, a buffer
and a policy, with periodic tests, the stop rule and the console reporter.

Builds on ``contracts``, ``plugins`` and ``collect``; the policy and buffer are protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "BATCH_MODES",
    "BaseTrainer",
    "ConsoleReporter",
    "OffPolicyTrainer",
    "OfflineTrainer",
    "OnPolicyTrainer",
    "StatsAccumulator",
    "TrainResult",
    "TrainerState",
    "continue_line",
    "main_loss",
    "threshold_trend",
    "time_split",
]

if TYPE_CHECKING:
    from rlblocks.trainers._console import (
        ConsoleReporter,
        continue_line,
        main_loss,
        threshold_trend,
        time_split,
    )
    from rlblocks.trainers._stats import StatsAccumulator
    from rlblocks.trainers._trainer import (
        BATCH_MODES,
        BaseTrainer,
        OfflineTrainer,
        OffPolicyTrainer,
        OnPolicyTrainer,
        TrainerState,
        TrainResult,
    )

__getattr__, __dir__ = attach(__name__, __file__)
