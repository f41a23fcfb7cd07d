"""Offline to online: a run that starts from another run's policy (``train(..., init_from=RUN)``,
``rlblocks train ALGO --init-from RUN``).

The source run is read as :func:`rlblocks.load` reads it (its ``config.json`` as plain data, its
``best.pt`` with ``weights_only``, the import trust rule of :mod:`rlblocks.run._trust`), so a
run from elsewhere runs no code of its own. The new run takes, below its own settings (config
file, flags, ``--set``), the source's env (when it names none) with its make kwargs, wrappers
and frame stacking, and the algo settings both algorithms have (network sizes included), with
no warm-up of random actions (``trainer.warmup_steps=0``: the policy acts well already), and
records where it started (``run.init_from``: the run, the checkpoint and its sha256, and
whether its data filled the replay buffer).

Weights are matched by name, network by network (the first part of a ``state_dict`` key:
``actor``, ``critic``, ``model``...). The source must fit: every weight both have must have the
same shape, a network the new run has is taken whole or not at all, and statistics the source
keeps outside any weight of the new run (TD3+BC's ``obs_mean``: what its networks see depends
on them) refuse the start. Parameters of the source the new run has no place for (a Lagrange
multiplier, a network only the source trains) are left behind; networks only the new run has
start fresh (with a warning); a target network the source lacks starts as a copy of its online
network. Optimizer state is not carried over.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from rlblocks.contracts import ConfigError
from rlblocks.run import _config as cfg
from rlblocks.run._agent import _resolve, load
from rlblocks.run._checkpoint import GenerationStore
from rlblocks.run._compose import spec_lookup
from rlblocks.run._trust import check_run_imports

__all__ = ["init_buffer", "init_weights", "resolve_init_from"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_init_from(
    run: str | os.PathLike[str],
    algo: str,
    *,
    env_given: bool,
    with_buffer: bool,
    trusted: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(layer, record)`` for a new ``algo`` run started from ``run`` (a run directory or a
    checkpoint file in one): the config layer it takes from the source (below the user's own
    settings; the env only when ``env_given`` is False) and what ``run.init_from`` records.
    The source's config is checked against the trust rule before anything is built."""
    ckpt, config_file = _resolve(run, "best")
    source = cfg.read_config(config_file, spec_lookup)
    check_run_imports(source, trusted=trusted)
    target = spec_lookup("algo", algo)
    if with_buffer and target.training != "off-policy":
        raise ConfigError(
            f"init_buffer fills the replay buffer of an off-policy run, and algo {algo!r} trains "
            f"{target.training}; leave out init_buffer (--init-buffer)"
        )
    # the policy acts well already: no warm-up of random actions before it learns
    layer: dict[str, Any] = {
        "buffer": {"stack_num": source.buffer.stack_num},
        "trainer": {"warmup_steps": 0},
    }
    if not env_given:
        if source.env.factory is not None:
            raise ConfigError(
                f"--init-from: {config_file.parent} trained on envs made by the factory "
                f"{source.env.factory}; pass the env the new run trains on (env=..., --env ID)"
            )
        layer["env"] = {
            "id": source.env.id,
            "make_kwargs": dict(source.env.make_kwargs or {}),
            "wrappers": list(source.env.wrappers),
        }
    own = cfg.to_dict(source).get("algo") or {}
    if target.config is not None and isinstance(own, Mapping):
        names = {f.name for f in attrs.fields(target.config)}
        shared = {key: value for key, value in own.items() if key in names}
        if shared:
            layer["algo"] = shared
    record: dict[str, Any] = {
        "run": str(config_file.parent.resolve()),
        "algo": source.algo_name,
        "checkpoint": str(ckpt.resolve()),
        "sha256": _sha256(ckpt),
        "buffer": bool(with_buffer),
    }
    if with_buffer:
        record["data"] = str(_source_data(source, config_file.parent))
    return layer, record


def _source_data(source: cfg.ExperimentConfig, run_dir: Path) -> Path:
    """The source run's data: an offline run's dataset, an off-policy run's saved replay
    buffer (its newest intact checkpoint generation's ``buffer.h5``)."""
    if source.buffer.dataset is not None:
        return Path(source.buffer.dataset)
    gen = GenerationStore(run_dir / "checkpoints").latest_good()
    data = gen / "buffer.h5" if gen is not None else run_dir / "buffer.h5"
    if not data.is_file():
        raise ConfigError(
            f"--init-buffer: {run_dir} saved no replay buffer ({data} is missing: an on-policy "
            "run keeps none, and run.save_buffer=false saves none); leave out --init-buffer"
        )
    return data


def init_weights(policy: Any, record: Mapping[str, Any], algo: str, trusted: bool) -> None:
    """Load the weights of the checkpoint ``record`` names (``run.init_from``) into the new
    run's ``policy`` (see the module's description of what must fit), refusing a checkpoint
    that changed since the run's config recorded its sha256."""
    from rlblocks.algo import TargetNetwork

    ckpt = Path(str(record["checkpoint"]))
    where = f"run.init_from: {record.get('run')}"
    if not ckpt.is_file():
        raise ConfigError(f"{where}: its checkpoint {ckpt} is gone; start from another run")
    if record.get("sha256") not in (None, _sha256(ckpt)):
        raise ConfigError(
            f"{where}: its checkpoint {ckpt} changed since this run's config recorded it; "
            "start again from the run as it is now (train ... --init-from RUN)"
        )
    agent = load(ckpt, trust_imports=trusted)
    source = agent.policy
    for what in ("observation_space", "action_space"):
        have, want = getattr(source, what), getattr(policy, what)
        if have != want:
            raise ConfigError(
                f"{where}: its {agent.algo} agent acts on the {what.replace('_', ' ')} {have}, "
                f"and this run's env has {want}; start from a run on this env"
            )
    twins = {name for name, module in policy.named_modules() if isinstance(module, TargetNetwork)}
    # weights only: a target network's count of updates is the run's own, and starts over
    counts = {f"{name}.updates" for name in twins}
    src = {k: v for k, v in source.state_dict().items() if k not in counts}
    dst = {k: v for k, v in policy.state_dict().items() if k not in counts}
    stats = {name for name, _ in source.named_buffers() if name in src}
    mismatch = _mismatch(src, dst, stats, twins, agent.algo, algo)
    if mismatch:
        raise ConfigError(
            f"--init-from: the {agent.algo} run {record.get('run')} does not fit {algo}'s "
            f"networks: {mismatch}; start from a run of {algo}, or of an algorithm with the same "
            "networks and settings"
        )
    groups = _groups(dst)
    loaded = {top for top, keys in groups.items() if all(k in src for k in keys)}
    merged = {k: src.get(k, v) for k, v in dst.items()}
    policy.load_state_dict(merged)
    for name in twins - loaded:  # a target network the source lacks copies its online network
        _copy_online(policy.get_submodule(name))
    fresh = sorted(set(groups) - loaded - twins)
    if fresh:
        warnings.warn(
            f"--init-from: {', '.join(fresh)} of {algo} start fresh ({agent.algo} has no such "
            "weights)",
            stacklevel=2,
        )


def _groups(state: Mapping[str, Any]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for key in state:
        groups.setdefault(key.split(".", 1)[0], []).append(key)
    return groups


def _mismatch(
    src: Mapping[str, Any],
    dst: Mapping[str, Any],
    stats: set[str],
    twins: set[str],
    src_algo: str,
    algo: str,
) -> str:
    """Why the source's weights ``src`` do not fit ``dst``; "" when they do."""
    for key, value in dst.items():
        if key in src and tuple(src[key].shape) != tuple(value.shape):
            return (
                f"{key} has shape {tuple(src[key].shape)} in {src_algo} and "
                f"{tuple(value.shape)} in {algo}"
            )
    for key in src:
        if key in stats and key not in dst:
            return (
                f"{src_algo} keeps the statistics {key}, which shape what its networks see, "
                f"and {algo} has no place for them"
            )
    groups = _groups(dst)
    for top, keys in groups.items():
        have = [k for k in keys if k in src]
        if have and len(have) < len(keys):
            missing = next(k for k in keys if k not in src)
            return f"{algo}'s {top} matches {src_algo}'s only in part ({missing} is not in it)"
    if not any(k in src for top, keys in groups.items() if top not in twins for k in keys):
        return f"{algo} and {src_algo} share no network"
    return ""


def _copy_online(target: Any) -> None:
    """Make a :class:`~rlblocks.algo.TargetNetwork` an exact copy of its online network."""
    tau, updates = target.tau, target.updates
    target.tau = 1.0
    try:
        target.update()
    finally:
        target.tau, target.updates = tau, updates


def init_buffer(buffer: Any, policy: Any, record: Mapping[str, Any], trusted: bool) -> int:
    """Fill the new run's replay ``buffer`` with the source's data (``record["data"]``: a
    dataset or a saved replay buffer); returns how many transitions went in. Every episode
    ends where the data does (one still running ends truncated); episodes keep their order, and
    env ``e`` of the data goes to env ``e % num_envs`` of ``buffer``, so no episode links into
    another. When the data holds more than the buffer, the newest stay."""
    from rlblocks.run._dataset import load_dataset
    from rlblocks.run._minari import to_policy_actions

    path = Path(str(record.get("data")))
    try:
        loaded = load_dataset(path, stack_num=int(getattr(buffer, "stack_num", 1)))
    except ConfigError as exc:
        raise ConfigError(f"run.init_from: {exc}") from exc
    data = loaded.buffer
    if loaded.env_actions:
        to_policy_actions(data, policy)
    data.truncate_unfinished()
    index = np.asarray(data.sample_index(0))
    if len(index) == 0:
        return 0
    envs = np.asarray(data.env_id)[index]
    order = np.argsort(envs, kind="stable")  # each env's steps together, in time order
    index, envs = index[order], envs[order]
    rows = {key: data.get(index, key, stack_num=1) for key in data.keys()}  # noqa: SIM118
    if "obs_next" not in rows:
        rows["obs_next"] = data.get(index, "obs_next", stack_num=1)
    try:
        buffer.extend(rows, envs % int(buffer.num_envs))
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"run.init_from: the data {path} does not fit this run's replay buffer ({exc}); "
            "leave out --init-buffer"
        ) from exc
    return len(index)
