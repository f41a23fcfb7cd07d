"""Datasets from trained agents: ``rlblocks collect RUN --episodes N --out DATASET``.

:func:`collect_dataset` loads a run's agent (:func:`rlblocks.load`, with its trust rule) and
records a dataset for offline learning in one of four modes:

* ``expert``: the agent's test actions (what ``rlblocks eval`` plays);
* ``noisy``: the agent's actions with noise: for discrete actions (Discrete, MultiDiscrete,
  MultiBinary) a random action with probability ``epsilon``, for Box actions Gaussian noise of
  standard deviation ``sigma`` in units of half the action range (the policy's [-1, 1] scale),
  clipped to the bounds;
* ``mixture``: whole episodes of the agent's test actions and, for a ``random_fraction`` of the
  episodes (chosen at random), of uniformly random actions;
* ``replay``: the run's whole replay buffer as its newest checkpoint saved it (no env step).

The dataset is a Minari dataset (the default when ``minari`` is installed; an id in the local
Minari datasets folder or a directory) or an rlblocks hdf5 file (``format="hdf5"``, or an
``.h5`` / ``.hdf5`` name), written beside its place and renamed into it. Its metadata records how
it was made: the run, the checkpoint and its sha256, the mode and its noise, the episodes, the
seed and the version of rlblocks.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping
from importlib import metadata as dist_metadata
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from rlblocks.contracts import Batch, ConfigError, tuples_as_dicts
from rlblocks.run._advice import option
from rlblocks.run._agent import Agent, _FrameStack, _resolve, load
from rlblocks.run._checkpoint import GenerationStore
from rlblocks.run._minari import (
    Episode,
    minari_target,
    stack_episode,
    write_minari,
)

__all__ = ["COLLECT_MODES", "CollectedDataset", "collect_dataset"]

#: how :func:`collect_dataset` chooses the actions it records
COLLECT_MODES = ("expert", "noisy", "mixture", "replay")
_HDF5_SUFFIXES = (".h5", ".hdf5")


@attrs.define
class CollectedDataset:
    """What :func:`collect_dataset` wrote."""

    #: the dataset: the hdf5 file, or the Minari dataset's directory
    path: Path
    #: ``"minari"`` or ``"hdf5"``
    format: str
    #: the Minari dataset id (``minari.load_dataset`` reads it when it is in the local folder)
    dataset_id: str | None
    episodes: int
    steps: int
    #: the return of every recorded episode (replay: of every whole episode in the buffer)
    returns: np.ndarray
    #: how it was made, as the dataset records it
    metadata: dict[str, Any]

    def __str__(self) -> str:
        mean = f", return {np.mean(self.returns):.2f}" if len(self.returns) else ""
        name = f" (Minari id {self.dataset_id})" if self.dataset_id else ""
        return f"{self.episodes} episodes, {self.steps} steps{mean}: {self.path}{name}"


def collect_dataset(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    episodes: int | None = None,
    *,
    mode: str = "expert",
    epsilon: float | None = None,
    sigma: float | None = None,
    random_fraction: float | None = None,
    format: str | None = None,
    seed: int = 0,
    which: str = "best",
    device: str | None = None,
    overwrite: bool = False,
    trust_imports: bool = False,
    max_steps_per_episode: int | None = None,
) -> CollectedDataset:
    """Record a dataset from the agent of ``run`` (a run directory or a checkpoint file) into
    ``out`` and return what was written (see the module's description of the modes).

    ``episodes`` whole episodes are played (not in ``replay`` mode), episode ``k`` from the env
    seed ``seed + k``; the noise and the choice of random episodes draw from ``seed`` too, so
    the same arguments record the same dataset. ``format`` is ``"minari"`` or ``"hdf5"``
    (default: hdf5 for an ``.h5`` / ``.hdf5`` name, else Minari when it is installed). An
    existing dataset is refused unless ``overwrite``. ``which``, ``device`` and
    ``trust_imports`` load the agent as :func:`rlblocks.load` does. ``max_steps_per_episode``
    ends an episode (truncated) after that many steps; None: the env's own time limit. An env
    without one needs it, so that an agent that never ends an episode cannot hang the
    recording."""
    _check_arguments(mode, episodes, epsilon, sigma, random_fraction)
    if max_steps_per_episode is not None and (
        isinstance(max_steps_per_episode, bool) or int(max_steps_per_episode) < 1
    ):
        raise ConfigError(
            f"max_steps_per_episode must be a whole number >= 1, got {max_steps_per_episode!r}; "
            "leave it out for the env's own time limit"
        )
    limit = None if max_steps_per_episode is None else int(max_steps_per_episode)
    fmt = _format(out, format)
    ckpt, config_file = _resolve(run, which)
    run_dir = config_file.parent
    agent = load(ckpt, device=device, trust_imports=trust_imports)
    agent._refuse_factory_run("collecting a dataset from it")
    record: dict[str, Any] = {
        "made_by": "rlblocks collect",
        "rlblocks_version": _rlblocks_version(),
        "run": str(run_dir.resolve()),
        "algo": agent.algo,
        "env": agent.env_id,
        "checkpoint": str(Path(ckpt).resolve()),
        "checkpoint_sha256": _sha256(Path(ckpt)),
        "mode": mode,
        "seed": int(seed),
    }
    if mode == "replay":
        buffer, source = _replay_buffer(run_dir, agent, trust_imports)
        record["replay_buffer"] = str(source.resolve())
        record["replay_buffer_sha256"] = _sha256(source)
        if fmt == "hdf5":
            return _write_hdf5_buffer(buffer, out, record, overwrite)
        eps = _buffer_episodes(buffer, agent)
    else:
        assert episodes is not None  # _check_arguments
        discrete = not isinstance(agent.action_space, gym.spaces.Box)
        if mode == "noisy":
            if discrete:
                epsilon = 0.1 if epsilon is None else float(epsilon)
                record["epsilon"] = epsilon
            else:
                sigma = 0.1 if sigma is None else float(sigma)
                record["sigma"] = sigma
            _check_noise_flag(agent, epsilon, sigma)
        if mode == "mixture":
            random_fraction = 0.5 if random_fraction is None else float(random_fraction)
            record["random_fraction"] = random_fraction
        eps = _play(agent, int(episodes), mode, epsilon, sigma, random_fraction, int(seed),
                    limit, record)  # fmt: skip
        if mode == "mixture":
            record["random_episodes"] = [k for k, ep in enumerate(eps) if ep.random]
    record["episodes"] = len(eps)
    record["steps"] = int(sum(len(ep) for ep in eps))
    returns = np.asarray([float(np.sum(ep.rewards)) for ep in eps], dtype=np.float64)
    if len(returns):
        record["returns"] = {"mean": float(returns.mean()), "min": float(returns.min()),
                             "max": float(returns.max())}  # fmt: skip
    if fmt == "hdf5":
        buffer = _episodes_buffer(eps, agent)
        written = _write_hdf5_buffer(buffer, out, record, overwrite)
        return attrs.evolve(written, returns=returns, episodes=len(eps))
    target, dataset_id = minari_target(out)
    env_spec = _env_spec(agent)
    write_minari(
        target, dataset_id, eps, _raw_space(agent), agent.action_space, env_spec=env_spec,
        metadata={
            "algorithm_name": f"rlblocks {agent.algo}",
            "description": (
                f"{mode} data of a {agent.algo} agent on {agent.env_id}, recorded by "
                f"rlblocks collect from {run_dir}"
            ),
            "rlblocks": record,
        },
        overwrite=overwrite,
    )  # fmt: skip
    return CollectedDataset(path=target, format="minari", dataset_id=dataset_id,
                            episodes=len(eps), steps=record["steps"], returns=returns,
                            metadata=record)  # fmt: skip


# -- arguments ------------------------------------------------------------------------------------
def _check_arguments(
    mode: str,
    episodes: int | None,
    epsilon: float | None,
    sigma: float | None,
    random_fraction: float | None,
) -> None:
    if mode not in COLLECT_MODES:
        raise ConfigError(f"mode {mode!r} is not one of {', '.join(COLLECT_MODES)}")
    if mode == "replay":
        if episodes is not None:
            raise ConfigError(
                "mode 'replay' records the run's whole replay buffer, so a number of episodes "
                f"would be ignored; leave {option('episodes', '--episodes')} out"
            )
    elif episodes is None or int(episodes) < 1:
        raise ConfigError(
            f"mode {mode!r} plays episodes: pass how many, "
            f"{option('episodes=N', '--episodes N')} (N >= 1)"
        )
    for name, flag, value, needs in (
        ("epsilon", "--epsilon", epsilon, "noisy"),
        ("sigma", "--sigma", sigma, "noisy"),
        ("random_fraction", "--random-fraction", random_fraction, "mixture"),
    ):
        if value is None:
            continue
        if mode != needs:
            raise ConfigError(
                f"{option(name, flag)} applies to mode {needs!r}, not {mode!r}; leave it out "
                f"or pass {option(f'mode={needs!r}', f'--mode {needs}')}"
            )
        low, high = (0.0, 1.0) if name != "sigma" else (0.0, float("inf"))
        if not (low <= float(value) <= high):
            raise ConfigError(f"{option(name, flag)} must be in [{low}, {high}], got {value}")


def _check_noise_flag(agent: Agent, epsilon: float | None, sigma: float | None) -> None:
    """``sigma`` is for Box actions and ``epsilon`` for the others: the wrong one is refused."""
    box = isinstance(agent.action_space, gym.spaces.Box)
    if box and epsilon is not None:
        raise ConfigError(
            f"{option('epsilon', '--epsilon')} picks random discrete actions, and "
            f"{agent.env_id}'s actions are {agent.action_space}; give Gaussian noise with "
            f"{option('sigma=S', '--sigma S')}"
        )
    if not box and sigma is not None:
        raise ConfigError(
            f"{option('sigma', '--sigma')} is Gaussian noise on Box actions, and "
            f"{agent.env_id}'s actions are {agent.action_space}; give the probability of a "
            f"random action with {option('epsilon=E', '--epsilon E')}"
        )


def _format(out: str | os.PathLike[str], format: str | None) -> str:
    """The dataset format: as asked, else hdf5 for an ``.h5`` name, else Minari when installed."""
    hdf5_name = Path(os.fspath(out)).suffix.lower() in _HDF5_SUFFIXES
    if format is not None:
        if format not in ("minari", "hdf5"):
            raise ConfigError(f"format {format!r} is not 'minari' or 'hdf5'")
        if format == "minari" and hdf5_name:
            raise ConfigError(
                f"{os.fspath(out)} names an hdf5 file and the format is Minari (a directory); "
                "name the dataset without .h5, or write rlblocks hdf5 "
                f"({option(repr('hdf5').join(('format=', '')), '--format hdf5')})"
            )
        return format
    if hdf5_name:
        return "hdf5"
    try:
        import minari  # noqa: F401
    except ImportError:
        warnings.warn(
            "minari is not installed, so the dataset is an rlblocks hdf5 file; pip install "
            "'rlblocks[minari]' for Minari datasets",
            stacklevel=3,
        )
        return "hdf5"
    return "minari"


# -- playing --------------------------------------------------------------------------------------
def _raw_space(agent: Agent) -> gym.Space:
    """The env's own observation space (the agent's, less its frame stacking)."""
    space = agent.observation_space
    if agent.frame_stack > 1 and isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(space.low[0], space.high[0], dtype=space.dtype)
    return space


def _make_env(agent: Agent) -> gym.Env:
    from rlblocks.run._compose import make_env_fns

    c = agent.config.env
    return make_env_fns(c.id, 1, dict(c.make_kwargs or {}), list(c.wrappers))[0]()


def _env_spec(agent: Agent) -> Any:
    """The env spec Minari records (so ``recover_environment`` makes the env), when the run's
    env is the registered env as it is (no wrappers of the run's own)."""
    if agent.config.env.wrappers:
        return None
    env = _make_env(agent)
    try:
        return env.spec
    finally:
        env.close()


def _play(
    agent: Agent,
    episodes: int,
    mode: str,
    epsilon: float | None,
    sigma: float | None,
    random_fraction: float | None,
    seed: int,
    max_steps: int | None = None,
    record: dict[str, Any] | None = None,
) -> list[Episode]:
    """Play ``episodes`` whole episodes of one env (episode ``k`` from seed ``seed + k``), each
    ended (truncated) after ``max_steps`` steps at the latest (None: the env's time limit,
    refused when it has none); the cap goes into ``record``."""
    rng = np.random.default_rng(seed)
    random_count = round(float(random_fraction or 0.0) * episodes) if mode == "mixture" else 0
    randoms = set(rng.permutation(episodes)[:random_count].tolist())
    env = _make_env(agent)
    space = env.action_space
    space.seed(seed)
    out = []
    try:
        limit = _episode_limit(env, agent, max_steps)
        if record is not None and max_steps is not None:
            record["max_steps_per_episode"] = limit
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            stack = _FrameStack(agent.frame_stack, obs)
            observations, actions, rewards, terms, truncs = [obs], [], [], [], []
            done = False
            while not done:
                if k in randoms:
                    act = space.sample()
                else:
                    act = agent.act(stack.obs if stack else obs)
                    if mode == "noisy":
                        act = _noisy(act, space, epsilon, sigma, rng)
                obs, rew, terminated, truncated, _ = env.step(act)
                stack.push(obs)
                observations.append(obs)
                actions.append(act)
                rewards.append(float(np.sum(rew)))
                terms.append(bool(terminated))
                truncated = bool(truncated) or (len(actions) >= limit and not terminated)
                truncs.append(truncated)
                done = bool(terminated or truncated)
            out.append(Episode(
                observations=stack_episode(env.observation_space, observations),
                actions=stack_episode(space, actions),
                rewards=np.asarray(rewards, dtype=np.float64),
                terminations=np.asarray(terms), truncations=np.asarray(truncs),
                seed=seed + k, random=k in randoms,
            ))  # fmt: skip
    finally:
        env.close()
    return out


def _episode_limit(env: gym.Env, agent: Agent, max_steps: int | None) -> int:
    """The most steps an episode may take: ``max_steps``, else the env's time limit."""
    if max_steps is not None:
        return int(max_steps)
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None)
    if limit is None:
        raise ConfigError(
            f"{agent.env_id} has no time limit, so an episode the agent never ends would never "
            f"stop; pass {option('max_steps_per_episode=N', '--max-steps-per-episode N')}"
        )
    return int(limit)


def _noisy(
    act: Any, space: gym.Space, epsilon: float | None, sigma: float | None,
    rng: np.random.Generator,
) -> Any:
    """``act`` with the noisy mode's noise (see the module's description)."""
    if isinstance(space, gym.spaces.Box):
        half = (space.high - space.low) / 2.0
        noisy = np.asarray(act, dtype=np.float64) + rng.normal(0.0, float(sigma or 0.0),
                                                               space.shape) * half  # fmt: skip
        return np.clip(noisy, space.low, space.high).astype(space.dtype)
    if rng.random() < float(epsilon or 0.0):
        return space.sample()
    return act


# -- writing --------------------------------------------------------------------------------------
def _episodes_buffer(episodes: list[Episode], agent: Agent) -> Any:
    """The episodes' transitions in an rlblocks buffer: observations as the collector stores
    them (Tuple entries keyed ``"0"``...), actions in the policy's units."""
    from rlblocks.replay import ReplayBuffer

    total = sum(len(ep) for ep in episodes)
    if total == 0:
        raise ConfigError("the episodes hold no steps: there is nothing to write")
    buffer = ReplayBuffer(total, num_envs=1, stack_num=agent.frame_stack)
    for ep in episodes:
        steps = len(ep)
        obs = tuples_as_dicts(ep.observations)
        act = tuples_as_dicts(ep.actions)
        if isinstance(agent.action_space, gym.spaces.Box):
            act = agent.policy.map_action_inverse(np.asarray(act, dtype=np.float64)).astype(
                agent.action_space.dtype
            )
        elif isinstance(agent.action_space, _DISCRETE):  # indices from 0, as buffers hold them
            act = np.asarray(agent.policy.map_action_inverse(np.asarray(act)))
        buffer.extend({
            "obs": _slice(obs, 0, steps), "act": act, "rew": ep.rewards,
            "terminated": ep.terminations, "truncated": ep.truncations,
            "obs_next": _slice(obs, 1, steps + 1),
        }, np.zeros(steps, dtype=np.int64))  # fmt: skip
    return buffer


#: discrete action spaces, whose ``start`` the env sees and buffers leave out
_DISCRETE = (gym.spaces.Discrete, gym.spaces.MultiDiscrete)


def _slice(tree: Any, start: int, stop: int) -> Any:
    if isinstance(tree, Mapping):
        return {key: _slice(value, start, stop) for key, value in tree.items()}
    return np.asarray(tree)[start:stop]


def _write_hdf5_buffer(
    buffer: Any, out: str | os.PathLike[str], record: dict[str, Any], overwrite: bool
) -> CollectedDataset:
    path = Path(os.fspath(out)).expanduser().absolute()
    if path.exists() and not overwrite:
        raise ConfigError(
            f"{path} exists already; pass another file name, or "
            f"{option('overwrite=True', '--overwrite')} to replace it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    record.setdefault("steps", len(buffer))
    buffer.save_hdf5(path, metadata=record)
    return CollectedDataset(path=path, format="hdf5", dataset_id=None,
                            episodes=int(record.get("episodes", 0)), steps=len(buffer),
                            returns=np.zeros(0), metadata=record)  # fmt: skip


# -- replay -------------------------------------------------------------------------------------
def _replay_buffer(run_dir: Path, agent: Agent, trust_imports: bool) -> tuple[Any, Path]:
    """The run's replay buffer from its newest intact checkpoint generation."""
    from rlblocks.replay import ReplayBuffer

    if agent.config.buffer.dataset is not None:
        raise ConfigError(
            f"{run_dir} is an offline run: its data is its dataset, "
            f"{agent.config.buffer.dataset}; pass that to --dataset, or record episodes of its "
            "agent (--mode expert, noisy or mixture)"
        )
    gen = GenerationStore(run_dir / "checkpoints").latest_good()
    source = gen / "buffer.h5" if gen is not None else run_dir / "buffer.h5"
    if not source.is_file():
        raise ConfigError(
            f"{run_dir} saved no replay buffer ({source} is missing: an on-policy run keeps "
            "none, and run.save_buffer=false saves none); record episodes of its agent instead "
            "(--mode expert, noisy or mixture)"
        )
    return ReplayBuffer.load_hdf5(source, trust_imports=trust_imports), source


def _buffer_episodes(buffer: Any, agent: Agent) -> list[Episode]:
    """A buffer's transitions as episodes, env by env in time order (an episode whose first
    steps the ring overwrote starts where the buffer does; one still running ends truncated),
    with env actions (the policy's :meth:`map_action`) and the env's own observations."""
    index = np.asarray(buffer.sample_index(0))
    if len(index) == 0:
        raise ConfigError("the run's replay buffer is empty: there is nothing to write")
    env_ids = np.asarray(buffer.env_id)[index]
    space = _raw_space(agent)
    episodes = []
    for env in np.unique(env_ids):
        rows = index[env_ids == env]
        obs = _plain(buffer.get(rows, "obs", stack_num=1))
        nxt = _plain(buffer.get(rows, "obs_next", stack_num=1))
        act = _plain(buffer.get(rows, "act"))
        rew = np.asarray(buffer.get(rows, "rew"), dtype=np.float64)
        rew = rew.reshape(len(rows), -1).sum(axis=1)
        term = np.asarray(buffer.get(rows, "terminated"), dtype=bool)
        trunc = np.asarray(buffer.get(rows, "truncated"), dtype=bool).copy()
        ends = np.flatnonzero(term | trunc)
        if len(ends) == 0 or ends[-1] != len(rows) - 1:
            trunc[-1] = True
            ends = np.append(ends, len(rows) - 1)
        start = 0
        for end in ends.tolist():
            seg = slice(start, end + 1)
            observations = _join(_slice(obs, seg.start, seg.stop), _slice(nxt, end, end + 1))
            actions = _slice(act, seg.start, seg.stop)
            if isinstance(agent.action_space, (gym.spaces.Box, *_DISCRETE)):
                actions = agent.policy.map_action(np.asarray(actions))
            episodes.append(Episode(
                observations=_as_space_tree(space, observations),
                actions=_as_space_tree(agent.action_space, actions),
                rewards=rew[seg], terminations=term[seg], truncations=trunc[seg],
            ))  # fmt: skip
            start = end + 1
    return episodes


def _plain(value: Any) -> Any:
    """A Batch of a nested key as nested dicts of arrays."""
    if isinstance(value, Batch | Mapping):
        return {key: _plain(value[key]) for key in value.keys()}  # noqa: SIM118 (a Batch)
    return np.asarray(value)


def _join(head: Any, last: Any) -> Any:
    if isinstance(head, Mapping):
        return {key: _join(head[key], last[key]) for key in head}
    return np.concatenate([head, last])


def _as_space_tree(space: gym.Space, tree: Any) -> Any:
    """Dicts keyed ``"0"``, ``"1"``... back to tuples where ``space`` has a Tuple (Minari's
    form), nested like ``space``."""
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_as_space_tree(sub, tree[str(i)]) for i, sub in enumerate(space.spaces))
    if isinstance(space, gym.spaces.Dict):
        return {key: _as_space_tree(sub, tree[key]) for key, sub in space.spaces.items()}
    return tree


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _rlblocks_version() -> str:
    try:
        return dist_metadata.version("rlblocks")
    except dist_metadata.PackageNotFoundError:
        return "unknown"
