"""The dataset of an offline run: where it is (an rlblocks hdf5 file, or a Minari dataset by path
or id), reading it into a buffer, its fingerprint (checked again on resume), its check against
the env's spaces, its path made absolute, and what it says about how it was made."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
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
from rlblocks.run._minari import minari_data_dir, minari_datasets_root, read_metadata, read_minari


# -- datasets of offline runs -------------------------------------------------------------------
def dataset_fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The absolute path, size and sha256 of a dataset: what an offline run's checkpoints
    record so a resume can refuse a dataset that changed (a dataset is never copied into a run).
    A Minari dataset (a directory) is hashed file by file, names included, in sorted order."""
    digest = hashlib.sha256()
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    size = 0
    for file in files:
        if root.is_dir():
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        size += file.stat().st_size
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return {
        "path": os.path.abspath(path),
        "size": size,
        "sha256": digest.hexdigest(),
    }


@attrs.define
class LoadedDataset:
    """A dataset read into a buffer."""

    #: the transitions, in a :class:`~rlblocks.replay.ReplayBuffer`
    buffer: Any
    #: ``"rlblocks"`` (an hdf5 file of ``save_hdf5``) or ``"minari"``
    kind: str
    #: where it was read from: the file, or the Minari dataset's directory
    path: Path

    @property
    def env_actions(self) -> bool:
        """Whether its actions are the env's own (Minari), not a policy's units (rlblocks)."""
        return self.kind == "minari"


def find_dataset(ref: str | os.PathLike[str]) -> tuple[str, Path] | None:
    """``(kind, path)`` of the dataset ``ref`` names: an rlblocks hdf5 file (``"rlblocks"``,
    the file) or a Minari dataset (``"minari"``, its directory) by path or by id in the local
    Minari datasets folder; None when it names neither."""
    path = Path(ref).expanduser()
    data_dir = minari_data_dir(ref)
    if data_dir is not None:
        return "minari", data_dir.parent
    if path.is_file():
        return "rlblocks", path
    return None


def load_dataset(
    ref: str | os.PathLike[str],
    stack_num: int = 1,
    storage: str = "memory",
    storage_path: str | os.PathLike[str] | None = None,
) -> LoadedDataset:
    """Read the dataset ``ref`` names (see :func:`find_dataset`) into a buffer, never executing
    code the file names (HER's ``compute_reward`` and the like are refused). ``stack_num``
    applies to a Minari dataset (an rlblocks file keeps its own)."""
    from rlblocks.replay import ReplayBuffer

    found = find_dataset(ref)
    if found is None:
        raise ConfigError(
            f"$.buffer.dataset: {os.fspath(ref)} is not a file or a Minari dataset; pass "
            "--dataset with an hdf5 file (written by ReplayBuffer.save_hdf5, `rlblocks collect "
            "--format hdf5` or an online run's checkpoints/gen-N/buffer.h5), a Minari dataset "
            "directory (holding data/metadata.json) or the id of one in the local Minari "
            f"datasets folder ({minari_datasets_root()})"
        )
    kind, path = found
    if kind == "minari":
        buffer = read_minari(path / "data", stack_num=stack_num, storage=storage,
                             storage_path=storage_path)  # fmt: skip
    else:
        buffer = ReplayBuffer.load_hdf5(path, storage=storage, storage_path=storage_path)
    return LoadedDataset(buffer=buffer, kind=kind, path=path)


def dataset_metadata(ref: str | os.PathLike[str]) -> dict[str, Any]:
    """What a dataset records about how it was made (``rlblocks collect`` writes the run, its
    checkpoint's sha256, the mode, the noise, the episodes, the seed and rlblocks' version):
    the ``rlblocks`` entry of a Minari dataset's metadata, or an rlblocks hdf5 file's
    ``dataset`` attribute; ``{}`` when it records nothing."""
    found = find_dataset(ref)
    if found is None:
        raise ConfigError(f"{os.fspath(ref)} is neither an hdf5 dataset nor a Minari dataset")
    kind, path = found
    if kind == "minari":
        value = read_metadata(path / "data").get("rlblocks", {})
        return dict(value) if isinstance(value, Mapping) else {}
    import h5py

    with h5py.File(path, "r") as f:
        text = f.attrs.get("dataset")
    if text is None:
        return {}
    value = json.loads(text if isinstance(text, str) else bytes(text).decode())
    return dict(value) if isinstance(value, Mapping) else {}


def _space_shapes(space: gym.Space) -> Any:
    """The per-transition array shape(s) a buffer stores for ``space`` (a dict for Dict, keyed
    ``"0"``, ``"1"``... for Tuple)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _space_shapes(sub) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return {str(i): _space_shapes(sub) for i, sub in enumerate(space.spaces)}
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
    a resume from another working directory reads the same file); a Minari id becomes the path
    of that dataset in the local Minari datasets folder."""
    path = config.buffer.dataset
    if path is None or os.path.isabs(path):
        return config
    found = find_dataset(path)
    absolute = os.path.abspath(found[1] if found is not None else os.path.expanduser(path))
    buffer = attrs.evolve(config.buffer, dataset=absolute)
    return attrs.evolve(config, buffer=buffer)
