"""TensorBoard logger: a hook implementation writing scalars as event files."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from rlblocks.plugins import hookimpl
from rlblocks_logger_tensorboard._spec import TensorboardConfig


class TensorboardLogger:
    """Writes ``namespace/key`` scalars against env steps to ``log_dir``."""

    def __init__(self, log_dir: str | Path, config: TensorboardConfig | None = None) -> None:
        self.config = config or TensorboardConfig()
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(str(self.log_dir), flush_secs=int(self.config.flush_secs))

    def where(self) -> str:
        """Where the data is, for the run's summary: the event files' folder and the command
        that shows them."""
        logs = shlex.quote(str(self.log_dir))  # a command to paste: quoted for the shell
        return f"{self.log_dir} (watch it: tensorboard --logdir {logs})"

    @hookimpl
    def rlblocks_configure(self, config: dict, run_dir: Path | None) -> None:
        self.writer.add_text(
            "config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```"
        )

    @hookimpl
    def rlblocks_log(self, namespace: str, scalars: Mapping[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(f"{namespace}/{key}", value, step)

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        self.writer.flush()
        self.writer.close()

    @hookimpl
    def rlblocks_exception(self, exc: BaseException, where: str) -> None:
        self.writer.flush()
