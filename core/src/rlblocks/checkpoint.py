"""Atomic files: checkpoints (torch, loaded with ``weights_only``) and small JSON documents.

Every write goes to a temporary file in the target's directory, is flushed and fsynced, then
renamed over the target, so a crash leaves either the old file or the new one, never half of one.
Loading a checkpoint never unpickles code: only tensors and plain containers are accepted.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rlblocks.errors import CheckpointError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success fsync and rename it onto
    ``path``; on failure remove it and leave ``path`` untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the OS allows
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    with atomic_write(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, allow_nan=False, default=str)
        fh.write("\n")


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Save a dict of tensors and plain values (state dicts, counters) atomically."""
    import torch

    with atomic_write(path, "wb") as fh:
        torch.save(payload, fh)


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` without executing code from it."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; was the run started with checkpoints on?")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"cannot load checkpoint {path}: {exc}. It must hold only tensors and plain "
            "containers (files from other programs or code objects are refused)."
        ) from exc
