"""The dataset of an offline run: its fingerprint (checked again on resume), its check against
the env's spaces, and its path made absolute."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from rlblocks.contracts import (
    Batch,
    ConfigError,
    LayoutBuffer,
)
from rlblocks.run import _config as cfg


# -- datasets of offline runs -------------------------------------------------------------------
def dataset_fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The absolute path, size and sha256 of a dataset file: what an offline run's checkpoints
    record so a resume can refuse a file that changed (a dataset is never copied into a run)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return {
        "path": os.path.abspath(path),
        "size": os.path.getsize(path),
        "sha256": digest.hexdigest(),
    }


def _space_shapes(space: gym.Space) -> Any:
    """The per-transition array shape(s) a buffer stores for ``space`` (a dict for Dict)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _space_shapes(sub) for key, sub in space.spaces.items()}
    return tuple(space.shape) if space.shape is not None else None


def _stored_shapes(value: Any) -> Any:
    """The per-transition shapes of one stored row (``value`` has a leading batch axis)."""
    if isinstance(value, Mapping | Batch):
        return {key: _stored_shapes(value[key]) for key in value.keys()}  # noqa: SIM118 (a Batch)
    return tuple(np.asarray(value).shape[1:])


def check_dataset_spaces(
    buffer: Any, observation_space: gym.Space, action_space: gym.Space, path: str, env_id: str
) -> None:
    """Refuse a dataset whose observations or actions do not have the shapes of the env's
    spaces (a dataset recorded on another env), naming both."""
    if isinstance(buffer, LayoutBuffer):
        first = np.arange(buffer.maxsize)[buffer.layout.valid_slots()]
    else:
        first = np.arange(len(buffer))
    row = buffer[first[:1]]
    for what, key, space in (("observations", "obs", observation_space),
                             ("actions", "act", action_space)):  # fmt: skip
        want, have = _space_shapes(space), _stored_shapes(row[key])
        if isinstance(space, gym.spaces.Discrete) and have in ((), (1,)):
            continue
        if want != have:
            raise ConfigError(
                f"$.buffer.dataset: the {what} in {path} have shape {have}, but env {env_id!r} "
                f"has {space} (shape {want}); train on the env the dataset was recorded on "
                "(--env), or pass a dataset recorded on this env"
            )


def absolute_dataset(config: cfg.ExperimentConfig) -> cfg.ExperimentConfig:
    """``config`` with ``buffer.dataset`` as an absolute path (what ``config.json`` records, so
    a resume from another working directory reads the same file)."""
    path = config.buffer.dataset
    if path is None or os.path.isabs(path):
        return config
    buffer = attrs.evolve(config.buffer, dataset=os.path.abspath(path))
    return attrs.evolve(config, buffer=buffer)
