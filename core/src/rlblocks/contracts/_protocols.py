"""The contracts between rlblocks' modules: what a policy, buffer, vector env, collector and
trainer are. Plugins implement these; core's loops only rely on what is written here.

Shapes: ``N`` is the number of envs in a vector step, ``B`` a batch size.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from rlblocks.contracts._batch import Batch


@runtime_checkable
class VectorEnv(Protocol):
    """A batch of gymnasium envs stepped together.

    Unlike gymnasium's vector envs there is no autoreset: an env that returned ``terminated`` or
    ``truncated`` must be reset by the caller (the collector does so), so no transition ever spans
    two episodes. ``env_ids`` selects a subset; results come back in the order of ``env_ids``.
    """

    num_envs: int
    observation_space: gym.Space  # the space of one env
    action_space: gym.Space

    def reset(
        self,
        env_ids: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int] | None = None,
    ) -> tuple[Any, list[dict]]:
        """Reset the given envs (all when None); return obs ``[len(env_ids), ...]`` and infos.

        An int ``seed`` seeds env ``i`` with ``seed + i`` (reproducible, distinct per env)."""
        ...

    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step the given envs; return ``obs, rew, terminated, truncated, infos`` of N rows."""
        ...

    def close(self) -> None:
        """Release workers; calling it twice is harmless."""
        ...


@runtime_checkable
class Buffer(Protocol):
    """Stores transitions in time order with episode links (see :class:`rlblocks.ReplayBuffer`)."""

    maxsize: int

    def __len__(self) -> int: ...

    def add(
        self, batch: Batch | Mapping[str, Any], env_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Add one step of one or several envs; return ``(index, ep_return, ep_len, ep_start)``."""
        ...

    def sample_index(self, batch_size: int) -> np.ndarray:
        """Random valid indices; ``0`` means all valid indices in time order."""
        ...

    def sample(self, batch_size: int) -> tuple[Batch, np.ndarray]: ...

    def prev(self, index: np.ndarray | int) -> np.ndarray: ...

    def next(self, index: np.ndarray | int) -> np.ndarray: ...

    def unfinished_index(self) -> np.ndarray: ...

    def __getitem__(self, index: Any) -> Batch: ...

    def get(self, index: Any, key: str, default: Any = None, stack_num: int | None = None) -> Any:
        """Value of ``key`` at ``index`` (``obs_next`` rebuilt when not stored; ``done``
        derived); what the return math (:mod:`rlblocks.algo`) reads."""
        ...

    def reset(self) -> None: ...


# -- optional abilities --------------------------------------------------------------------------
# Small protocols for what only some components can do. Core checks them once, when a run (or a
# collector, or a policy's first update on a buffer) is built, through :class:`BufferAbilities`;
# its loops never probe components by attribute name.


@runtime_checkable
class PrioritizedBuffer(Protocol):
    """Takes new priorities after learning (prioritized replay): ``td_error [B]`` per index."""

    def update_priority(self, index: np.ndarray, td_error: np.ndarray) -> None: ...


@runtime_checkable
class AnnealedBuffer(Protocol):
    """Changes with training progress (prioritized replay's beta); told the env step per collect."""

    def set_env_step(self, env_step: int) -> None: ...


@runtime_checkable
class RelabellingBuffer(Protocol):
    """Rewrites what it samples (hindsight relabelling); ``batch_view`` is a buffer-like view
    whose reads follow the rewritten rows, so n-step and GAE targets see the same data."""

    def batch_view(self, batch: Batch, indices: np.ndarray) -> Buffer: ...


@runtime_checkable
class SeedableBuffer(Protocol):
    """Samples from its own random generator, seeded by the run."""

    def seed(self, seed: int | None = None) -> None: ...


@runtime_checkable
class EnvAttachedBuffer(Protocol):
    """Needs the env's own functions (a goal env's ``compute_reward``)."""

    def attach_env(self, env: Any) -> Any: ...


@runtime_checkable
class EpisodeCutBuffer(Protocol):
    """Can end its unfinished episodes as truncated (when the envs restart them): all of them,
    or with ``env_ids`` those of some envs (a collector cuts the episodes of a restarted env
    worker's envs so)."""

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray: ...


@runtime_checkable
class PersistentBuffer(Protocol):
    """Saves itself to an hdf5 file; ``buffer.read_hdf5(path)`` reads one back into it (keeping
    its storage), ``type(buffer).load_hdf5(path)`` into a new buffer."""

    def save_hdf5(self, path: Any, compression: str | None = None) -> None: ...

    def read_hdf5(self, path: Any) -> None: ...

    @classmethod
    def load_hdf5(cls, path: Any) -> Any: ...


@runtime_checkable
class AsyncVectorEnv(Protocol):
    """A vector env that can step some envs while others still run (``AsyncCollector``)."""

    def step_async(self, actions: Any, env_ids: Any = None) -> None: ...

    def step_wait(self, wait_num: int | None = None, timeout: float | None = None) -> Any: ...


@runtime_checkable
class ViewingPolicy(Protocol):
    """A policy that asks for trajectory views (RLlib's view requirements): extra columns the
    collector builds while acting and ``update`` builds for training."""

    view_requirements: Mapping[str, Any]


@runtime_checkable
class StackingBuffer(Protocol):
    """A buffer that stacks the last ``stack_num`` frames when it reads observations."""

    stack_num: int


@runtime_checkable
class ObsNextRebuildingBuffer(Protocol):
    """A buffer that may leave ``obs_next`` out and rebuild it as ``obs[next(i)]`` when read
    (``ignore_obs_next``): at an unfinished episode's last stored step it is then unknown."""

    ignore_obs_next: bool


@runtime_checkable
class RandomBuffer(Protocol):
    """A buffer that samples from one random generator of its own (``rng``), whose state a
    checkpoint saves so that a resumed run draws the batches it would have drawn."""

    rng: np.random.Generator


@runtime_checkable
class LayoutBuffer(Protocol):
    """A buffer whose slots a layout maps (not every slot below ``maxsize`` holds a step)."""

    layout: Any


@runtime_checkable
class ComposedBuffer(Protocol):
    """A buffer made of parts (:class:`rlblocks.ReplayBuffer`) that reports which optional
    abilities its parts give it."""

    def abilities(self) -> BufferAbilities: ...


@dataclass(frozen=True)
class BufferAbilities:
    """Which optional abilities a buffer has, found once with :meth:`of`."""

    prioritized: bool = False
    annealed: bool = False
    relabelling: bool = False
    seedable: bool = False
    env_attached: bool = False
    episode_cut: bool = False
    persistent: bool = False
    sequences: bool = False
    cuts_some_envs: bool = False
    """``truncate_unfinished`` takes ``env_ids``: it can end some envs' episodes."""
    stack_num: int = 1
    """Frames stacked when observations are read."""
    rebuilds_obs_next: bool = False
    """``obs_next`` is not stored but rebuilt from the next step (``ignore_obs_next``)."""

    @classmethod
    def of(cls, buffer: Any) -> BufferAbilities:
        """A composed buffer reports its parts' abilities itself; other buffers are checked
        against the small protocols above."""
        if buffer is None:
            return cls()
        if isinstance(buffer, ComposedBuffer):
            return buffer.abilities()
        return cls(
            prioritized=isinstance(buffer, PrioritizedBuffer),
            annealed=isinstance(buffer, AnnealedBuffer),
            relabelling=isinstance(buffer, RelabellingBuffer),
            seedable=isinstance(buffer, SeedableBuffer),
            env_attached=isinstance(buffer, EnvAttachedBuffer),
            episode_cut=isinstance(buffer, EpisodeCutBuffer),
            persistent=isinstance(buffer, PersistentBuffer),
            cuts_some_envs=isinstance(buffer, EpisodeCutBuffer)
            and _takes(buffer.truncate_unfinished, "env_ids"),
            stack_num=int(buffer.stack_num) if isinstance(buffer, StackingBuffer) else 1,
            rebuilds_obs_next=isinstance(buffer, ObsNextRebuildingBuffer)
            and bool(buffer.ignore_obs_next),
        )


def _takes(function: Any, parameter: str) -> bool:
    """Whether ``function`` has a parameter named ``parameter``."""
    try:
        return parameter in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


# -- vector-env and policy capabilities ---------------------------------------------------------


@runtime_checkable
class SnapshotVectorEnv(Protocol):
    """A vector env that saves and restores its envs exactly (exact resume). ``snapshot``
    returns one entry per env: ``{"env": state}``, or ``{"env": None, "why": reason}``."""

    def snapshot(self, env_ids: Any = None) -> list[dict[str, Any]]: ...

    def restore(self, snapshots: Sequence[Mapping[str, Any]], env_ids: Any = None) -> None: ...


@runtime_checkable
class RestartingVectorEnv(Protocol):
    """A vector env that may restart a dead or hung worker (``restart_failed``); the step that
    finds it dead then carries a made-up row marked ``info["env_worker_restarted"]``."""

    restart_failed: bool


@runtime_checkable
class NamedVectorEnv(Protocol):
    """A vector env that keeps its envs' gymnasium spec (``spec.id`` names them in errors)."""

    spec: Any


@runtime_checkable
class RunHooksEnv(Protocol):
    """An env class (the callable a gymnasium id names) that needs hook objects on the
    trainer's side of every run on it, e.g. the games' self-play, which copies the learner into
    the envs' opponent pools. The run registers what :meth:`rlblocks_run_hooks` returns into its
    plugin manager like the hooks a user passes; ``config`` is the run's config as plain data."""

    def rlblocks_run_hooks(self, config: Mapping[str, Any]) -> list[object]: ...


@runtime_checkable
class AutoChosenVectorEnv(Protocol):
    """A vector env that ``backend="auto"`` chose, saying which backend and why."""

    auto_choice: str


@dataclass(frozen=True)
class VectorEnvAbilities:
    """What a vector env can do beyond :class:`VectorEnv`, found once with :meth:`of`."""

    snapshots: bool = False
    restarts: bool = False
    asynchronous: bool = False
    name: str = ""
    """The env's id (its gymnasium spec's), else the backend's class name."""
    auto_choice: str = ""

    @classmethod
    def of(cls, envs: Any) -> VectorEnvAbilities:
        spec = envs.spec if isinstance(envs, NamedVectorEnv) else None
        env_id = spec.id if spec is not None and isinstance(spec.id, str) else ""
        return cls(
            snapshots=isinstance(envs, SnapshotVectorEnv),
            restarts=isinstance(envs, RestartingVectorEnv) and bool(envs.restart_failed),
            asynchronous=isinstance(envs, AsyncVectorEnv),
            name=env_id or type(envs).__name__,
            auto_choice=str(envs.auto_choice) if isinstance(envs, AutoChosenVectorEnv) else "",
        )


@runtime_checkable
class QuantizedActionPolicy(Protocol):
    """A policy whose env actions lie on a grid (``quantized_actions``, BDQ's bins): random
    warm-up actions are snapped to the grid, so the buffer stores an action it could choose."""

    quantized_actions: bool


@runtime_checkable
class DevicePolicy(Protocol):
    """A policy that says on which torch device it acts (``device``)."""

    device: Any


@dataclass(frozen=True)
class PolicyAbilities:
    """What a policy can do beyond :class:`Policy`, found once with :meth:`of`."""

    quantized_actions: bool = False
    device: Any = "cpu"
    watches_finite: bool = False
    views: bool = False

    @classmethod
    def of(cls, policy: Any) -> PolicyAbilities:
        if policy is None:
            return cls()
        return cls(
            quantized_actions=isinstance(policy, QuantizedActionPolicy)
            and bool(policy.quantized_actions),
            device=policy.device if isinstance(policy, DevicePolicy) else "cpu",
            watches_finite=isinstance(policy, FiniteWatchingPolicy),
            views=isinstance(policy, ViewingPolicy),
        )


@runtime_checkable
class InFlightCollector(Protocol):
    """A collector whose env steps may still be running between calls (``AsyncCollector``);
    trainers ``drain`` it before a checkpoint or a test."""

    in_flight: Any

    def drain(self) -> Any: ...


@runtime_checkable
class Policy(Protocol):
    """Acts and learns. ``forward`` maps a batch of observations to actions; ``update`` runs
    ``process_fn -> learn -> post_process_fn`` on a sample of a buffer.

    State flags (the seed's table): collecting = training and not updating; updating = training and
    updating; testing = not training.
    """

    training: bool
    updating: bool

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Return a Batch with ``act`` (and optionally ``state`` and ``policy`` to store)."""
        ...

    def map_action(self, act: Any) -> Any:
        """Turn the network's action into what the env accepts (scaling, bounding)."""
        ...

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch: ...

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]: ...

    def post_process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> None: ...

    def update(
        self, sample_size: int, buffer: Buffer | None, **kwargs: Any
    ) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...


class FiniteWatcher(Protocol):
    """Watches a policy's losses, gradients and parameters for NaN and infinite values; the
    trainer checks it once per iteration (one host sync)."""

    skip: bool
    """A step whose loss or gradients are not finite is left out instead of applied."""

    def attach(self) -> None:
        """Start watching (again, after a resume rebuilt the optimizers)."""
        ...

    def end_update(self, gradient_steps: int) -> None:
        """Close one update of ``gradient_steps`` gradient steps."""
        ...

    def check(self, gradient_step: int) -> str:
        """What went non-finite since the last check; empty when everything was finite."""
        ...

    def pop_skipped(self) -> int:
        """Steps skipped since the last call (with ``skip``)."""
        ...


@runtime_checkable
class FiniteWatchingPolicy(Protocol):
    """A policy that can watch itself for non-finite values (every ``BasePolicy`` can)."""

    def watch_finite(self, skip: bool = False) -> FiniteWatcher: ...


@runtime_checkable
class Collector(Protocol):
    """Runs a policy in a vector env and writes transitions into a buffer."""

    num_envs: int

    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        random: bool = False,
        render: float | None = None,
    ) -> Any:
        """Collect at least ``n_step`` steps, or exactly ``n_episode`` whole episodes."""
        ...

    def reset(self) -> None: ...


@runtime_checkable
class Trainer(Protocol):
    """Owns the schedule: collect, update, test, log, checkpoint, stop."""

    def run(self) -> Any:
        """Train until the stop rule fires; return the final result."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Counters and schedules needed to resume."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
