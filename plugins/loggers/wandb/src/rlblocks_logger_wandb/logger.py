"""W&B logger: one W&B run per rlblocks run, every scalar as ``namespace/key`` against env steps.

The W&B run starts at ``rlblocks_run_start`` with the resolved run config, and finishes at
``rlblocks_run_end`` (with the run's result in its summary) or at ``rlblocks_exception`` (exit code
1, so W&B marks it failed). Its id is saved in checkpoints, so a resumed rlblocks run continues
the same W&B run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlblocks.contracts import PluginLoadError
from rlblocks.plugins import hookimpl
from rlblocks_logger_wandb._spec import WandbConfig

if TYPE_CHECKING:
    import wandb

__all__ = ["WandbConfig", "WandbLogger", "resolve_mode"]

DEFAULT_PROJECT = "rlblocks"
#: the key of this logger's entry in a checkpoint's plugin state
CHECKPOINT_KEY = "wandb"


def _import_wandb() -> Any:
    # imported here, not at module level: building this logger is the only thing that needs it
    try:
        import wandb
    except ImportError as exc:
        raise PluginLoadError(
            "the wandb logger needs the wandb package, which is not installed: pip install wandb"
        ) from exc
    return wandb


def resolve_mode(config: WandbConfig) -> str:
    """The W&B mode a run uses: the config's, else ``$WANDB_MODE``, else online with an API key
    in the environment and offline without one."""
    if config.mode is not None:
        return config.mode
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode:
        return env_mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class WandbLogger:
    """Logs a run to Weights & Biases; built by the run with the run's logs directory."""

    def __init__(self, log_dir: str | Path, config: WandbConfig | None = None) -> None:
        self.config = config or WandbConfig()
        self.log_dir = Path(log_dir)
        self._wandb = _import_wandb()
        self.run: wandb.sdk.wandb_run.Run | None = None
        self._resume_id: str | None = None
        self._where: str | None = None

    def where(self) -> str | None:
        """Where the data is, for the run's summary: the run's URL online; offline, its folder
        and the command that uploads it. None before the W&B run started."""
        return self._where

    def start(self, config: Mapping[str, Any] | None = None, run_dir: Path | None = None) -> None:
        """Start the W&B run (the run-start hook calls this; logging before it starts one)."""
        c = self.config
        directory = Path(c.dir) if c.dir is not None else self.log_dir
        directory.mkdir(parents=True, exist_ok=True)
        default_name = (run_dir or self.log_dir.parent).name
        self.run = self._wandb.init(
            project=c.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            entity=c.entity,
            group=c.group,
            tags=list(c.tags) or None,
            name=c.name or os.environ.get("WANDB_NAME") or default_name,
            dir=str(directory),
            mode=resolve_mode(c),
            config=dict(config) if config is not None else None,
            id=self._resume_id,
            resume="allow" if self._resume_id is not None else None,
        )
        try:
            url = self.run.url  # None offline; some wandb versions raise there instead
        except Exception:
            url = None
        project = getattr(self.run, "project", None) or c.project or DEFAULT_PROJECT
        if url:
            self._where = f"{url} (project {project!r})"
        else:  # offline (or disabled): the run's files stay on this machine until synced
            folder = Path(self.run.dir).parent if getattr(self.run, "dir", None) else directory
            self._where = f"{folder}, project {project!r} (upload it: wandb sync {folder})"

    def finish(self, exit_code: int = 0) -> None:
        """Finish the W&B run (uploads what is pending when online); safe to call twice."""
        run, self.run = self.run, None
        if run is not None:
            run.finish(exit_code=exit_code)

    @hookimpl
    def rlblocks_checkpoint_load(self, checkpoint: Mapping[str, Any]) -> None:
        self._resume_id = checkpoint.get(CHECKPOINT_KEY, {}).get("run_id")

    @hookimpl
    def rlblocks_run_start(self, config: dict, run_dir: Path | None, resumed: bool) -> None:
        if self.run is None:
            self.start(config, run_dir)
        else:
            self.run.config.update(config, allow_val_change=True)

    @hookimpl
    def rlblocks_log(self, namespace: str, scalars: Mapping[str, float], step: int) -> None:
        if self.run is None:
            self.start()
        assert self.run is not None
        self.run.log({f"{namespace}/{key}": value for key, value in scalars.items()}, step=step)

    @hookimpl
    def rlblocks_checkpoint_save(self, checkpoint: dict) -> None:
        if self.run is not None:
            checkpoint[CHECKPOINT_KEY] = {"run_id": self.run.id}

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        if self.run is not None:
            self.run.summary.update({f"result/{k}": v for k, v in result.items()})
        self.finish()

    @hookimpl
    def rlblocks_exception(self, exc: BaseException, where: str) -> None:
        self.finish(exit_code=1)
