"""Minari datasets: read into a replay buffer, written from episodes.

A Minari dataset is a directory ``DATASET/data`` holding ``metadata.json`` (the spaces, counts
and free-form metadata) and the episodes (``main_data.hdf5`` in Minari's hdf5 format). Its
episodes keep every observation of an episode (one more than its steps) and the env's own
actions; rlblocks buffers keep transitions ``(obs, act, rew, terminated, truncated, obs_next)``
with Box actions in the policy's units ([-1, 1] when the policy scales actions). So reading
turns each episode into its transitions (actions stay in env units until the run's policy
maps them back: :func:`to_policy_actions`) and writing turns transitions back into episodes.

A dataset is named by a path (the dataset directory or its ``data`` directory) or by a Minari
id (``name-vN`` or ``namespace/name-vN``) in the local Minari datasets folder
(``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``). The ``minari`` package does the
reading and the writing and is optional (``pip install 'rlblocks[minari]'``): it is imported
only here, only when a Minari dataset is read or written. Reading never makes an env from the
file's env spec (that would import the module the spec names): a dataset must record its spaces,
as every dataset Minari 0.4 or later writes does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from rlblocks.contracts import ConfigError, tuples_as_dicts

#: where Minari keeps its local datasets, when set
MINARI_DATASETS_ENV = "MINARI_DATASETS_PATH"
#: a Minari dataset id: ``name-vN``, or ``namespace/name-vN`` (namespaces may nest)
_ID = re.compile(r"^(?:[-_\w]+/)*[-_\w]+-v\d+$")
_METADATA = "metadata.json"


def minari_datasets_root() -> Path:
    """The local Minari datasets folder: ``$MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets`` (Minari's own rule; nothing is created)."""
    root = os.environ.get(MINARI_DATASETS_ENV)
    return Path(root) if root else Path.home() / ".minari" / "datasets"


def is_minari_id(text: str) -> bool:
    """Whether ``text`` has the form of a Minari dataset id (``[namespace/]name-vN``) and of
    no explicit path (``./x-v0``, ``/abs/x-v0`` and ``~/x-v0`` are paths)."""
    return bool(_ID.match(text)) and not text.startswith((".", "/", "~"))


def minari_data_dir(ref: str | os.PathLike[str]) -> Path | None:
    """The ``data`` directory (the one holding ``metadata.json``) of the Minari dataset ``ref``
    names: an existing path (the dataset directory, its ``data`` directory, or its
    ``main_data.hdf5``), else a Minari id in the local datasets folder; None for neither."""
    path = Path(ref).expanduser()
    candidates = [path / "data", path]
    if path.is_file():
        candidates = [path.parent] if path.name == "main_data.hdf5" else []
    elif not path.exists() and is_minari_id(os.fspath(ref)):
        candidates = [minari_datasets_root() / os.fspath(ref) / "data"]
    for candidate in candidates:
        if (candidate / _METADATA).is_file():
            return candidate
    return None


def require_minari(what: str) -> Any:
    """The ``minari`` module, or one line saying how to install it (``what``: the task)."""
    try:
        import minari
    except ImportError as exc:
        raise ConfigError(
            f"{what} needs the minari package, which is not installed: "
            "pip install 'rlblocks[minari]'"
        ) from exc
    return minari


def read_metadata(data_dir: Path) -> dict[str, Any]:
    """A Minari dataset's ``metadata.json`` as plain data (spaces still serialised)."""
    try:
        data = json.loads((data_dir / _METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{data_dir / _METADATA} cannot be read as a Minari dataset's metadata ({exc})"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{data_dir / _METADATA} is not a Minari dataset's metadata")
    return data


# -- reading ----------------------------------------------------------------------------------
def read_minari(
    data_dir: Path,
    stack_num: int = 1,
    storage: str = "memory",
    storage_path: str | os.PathLike[str] | None = None,
) -> Any:
    """The transitions of the Minari dataset in ``data_dir`` as a
    :class:`~rlblocks.replay.ReplayBuffer` (one env, every episode ended: a last episode that
    neither terminated nor was truncated ends truncated). Tuple observations become dicts keyed
    ``"0"``, ``"1"``..., as the collector stores them; actions stay in env units."""
    from rlblocks.replay import ReplayBuffer

    meta = read_metadata(data_dir)
    for key in ("observation_space", "action_space"):
        if key not in meta:
            raise ConfigError(
                f"the Minari dataset {data_dir.parent} records no {key}, and making its env "
                "from the recorded env spec to learn it would run the code that spec names; "
                "write the dataset again with a Minari version that records its spaces (0.4 "
                "or later)"
            )
    minari = require_minari(f"reading the Minari dataset {data_dir.parent}")
    try:
        dataset = minari.MinariDataset(data_dir)
    except (ValueError, KeyError, AssertionError, OSError) as exc:
        raise ConfigError(f"the Minari dataset {data_dir.parent} cannot be read: {exc}") from exc
    total = int(dataset.total_steps or 0)
    if total == 0:
        raise ConfigError(f"the Minari dataset {data_dir.parent} holds no steps")
    buffer = ReplayBuffer(total, num_envs=1, stack_num=stack_num, storage=storage,
                          path=storage_path)  # fmt: skip
    for episode in dataset.iterate_episodes():
        steps = len(episode.rewards)
        if steps == 0:
            continue
        terminated = np.asarray(episode.terminations, dtype=bool).reshape(steps)
        truncated = np.asarray(episode.truncations, dtype=bool).reshape(steps).copy()
        if not (terminated[-1] or truncated[-1]):
            truncated[-1] = True  # an episode cut off by the end of the recording
        obs = tuples_as_dicts(episode.observations)
        rows = {
            "obs": _slice(obs, 0, steps),
            "act": tuples_as_dicts(episode.actions),
            "rew": np.asarray(episode.rewards, dtype=np.float64).reshape(steps),
            "terminated": terminated,
            "truncated": truncated,
            "obs_next": _slice(obs, 1, steps + 1),
        }
        buffer.extend(rows, np.zeros(steps, dtype=np.int64))
    return buffer


def to_policy_actions(buffer: Any, policy: Any) -> None:
    """Map a Minari dataset's env actions in ``buffer`` to ``policy``'s units in place (what
    rlblocks buffers hold: Box actions in [-1, 1] when the policy scales them, discrete ones as
    indices from 0 whatever the space's ``start``)."""
    space = policy.action_space
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return
    inverse = getattr(policy, "map_action_inverse", None)
    act = getattr(buffer, "act", None)
    if inverse is None or not isinstance(act, np.ndarray):
        return
    if isinstance(space, gym.spaces.Box):
        act[...] = inverse(np.asarray(act, dtype=np.float64)).astype(act.dtype, copy=False)
    else:
        act[...] = np.asarray(inverse(np.asarray(act))).astype(act.dtype, copy=False)


def _slice(tree: Any, start: int, stop: int) -> Any:
    if isinstance(tree, Mapping):
        return {key: _slice(value, start, stop) for key, value in tree.items()}
    if isinstance(tree, list):  # Text leaves come back as lists of strings
        out = np.empty(stop - start, dtype=object)
        out[:] = tree[start:stop]
        return out
    return np.asarray(tree)[start:stop]


# -- writing ----------------------------------------------------------------------------------
@attrs.define
class Episode:
    """One recorded episode, as Minari keeps it: ``observations`` has one entry more than the
    steps (the last observation), nested like the observation space (dicts for Dict, tuples for
    Tuple); ``actions`` are env actions."""

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    seed: int | None = None
    #: whether a random policy played it (a ``mixture`` dataset's random episodes)
    random: bool = False

    def __len__(self) -> int:
        return len(self.rewards)


def minari_target(out: str | os.PathLike[str]) -> tuple[Path, str]:
    """``(dataset directory, dataset id)`` for writing a Minari dataset to ``out``: a Minari id
    (``[namespace/]name-vN``) goes into the local datasets folder; anything else is a directory
    path, whose dataset id is its name (with ``-v0`` added when it has no version)."""
    text = os.fspath(out)
    if is_minari_id(text):
        return minari_datasets_root() / text, text
    path = Path(text).expanduser().absolute()
    name = re.sub(r"[^-_\w]", "_", path.name) or "dataset"
    return path, name if re.search(r"-v\d+$", name) else f"{name}-v0"


def write_minari(
    target: Path,
    dataset_id: str,
    episodes: Sequence[Episode],
    observation_space: gym.Space,
    action_space: gym.Space,
    env_spec: Any = None,
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``episodes`` as the Minari dataset ``target`` (``target/data/metadata.json`` and
    ``main_data.hdf5``), readable by ``minari.MinariDataset`` and, inside the local datasets
    folder, by ``minari.load_dataset(dataset_id)``. Images are stored losslessly (no JPEG).
    ``metadata`` is added to ``metadata.json``. The dataset is written beside ``target`` and
    renamed into place, so a failure leaves no half dataset; an existing one is refused unless
    ``overwrite``."""
    minari = require_minari(f"writing the Minari dataset {target}")
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    if target.exists() and not overwrite:
        raise ConfigError(
            f"{target} exists already; pass another dataset name, or overwrite=True "
            "(--overwrite) to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _make_namespace(minari, target, dataset_id)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        data_dir = tmp / "data"
        data_dir.mkdir()
        spaces = {"observation_space": observation_space, "action_space": action_space,
                  "env_spec": env_spec, "data_format": "hdf5"}  # fmt: skip
        try:  # images losslessly: Minari 0.5.4 and later JPEG-encode them unless told not to
            storage = MinariStorage.new(data_dir, **spaces, jpeg_encoding=False)
        except TypeError:  # an earlier Minari, which never encodes them
            storage = MinariStorage.new(data_dir, **spaces)
        storage.update_metadata({
            "dataset_id": dataset_id,
            "minari_version": str(minari.__version__),
            **dict(metadata or {}),
        })  # fmt: skip
        storage.update_episodes([
            EpisodeBuffer(
                seed=ep.seed, observations=ep.observations, actions=ep.actions,
                rewards=list(np.asarray(ep.rewards, dtype=np.float64)),
                terminations=list(np.asarray(ep.terminations, dtype=bool)),
                truncations=list(np.asarray(ep.truncations, dtype=bool)),
            )
            for ep in episodes
        ])  # fmt: skip
        if any(ep.random for ep in episodes):
            storage.update_episode_metadata([{"random": bool(ep.random)} for ep in episodes])
        aside = None
        if target.exists():  # overwrite: the old dataset goes only once the new one is in place
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old",
                                          dir=target.parent))  # fmt: skip
            os.replace(target, aside / "dataset")
        os.replace(tmp, target)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _make_namespace(minari: Any, target: Path, dataset_id: str) -> None:
    """A dataset id with a namespace, written into the local datasets folder, gets the
    namespace Minari's listing expects (its metadata file), as ``minari`` itself makes it."""
    namespace = dataset_id.rpartition("/")[0]
    if not namespace or target != minari_datasets_root() / dataset_id:
        return
    try:
        from minari.namespace import create_namespace, list_local_namespaces

        if namespace not in list_local_namespaces():
            create_namespace(namespace)
    except Exception:  # the listing is a convenience: loading the dataset by id needs none
        return


def stack_episode(space: gym.Space, items: Sequence[Any]) -> Any:
    """Per-step observations (or actions) of one episode stacked as Minari stores them: arrays
    for array leaves, nested in dicts for Dict and tuples for Tuple spaces."""
    if isinstance(space, gym.spaces.Dict):
        return {key: stack_episode(sub, [item[key] for item in items])
                for key, sub in space.spaces.items()}  # fmt: skip
    if isinstance(space, gym.spaces.Tuple):
        return tuple(stack_episode(sub, [_entry(item, i) for item in items])
                     for i, sub in enumerate(space.spaces))  # fmt: skip
    if isinstance(space, gym.spaces.Text):
        return [str(item) for item in items]
    return np.stack([np.asarray(item) for item in items]).astype(space.dtype, copy=False)


def _entry(item: Any, i: int) -> Any:
    """Entry ``i`` of a Tuple observation, held as a tuple or as a dict keyed ``"0"``..."""
    return item[str(i)] if isinstance(item, Mapping) else item[i]
