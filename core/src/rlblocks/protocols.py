"""The contracts between rlblocks' modules: what a policy, buffer, vector env, collector and
trainer are. Plugins implement these; core's loops only rely on what is written here.

Shapes: ``N`` is the number of envs in a vector step, ``B`` a batch size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

    from rlblocks.batch import Batch


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

    def reset(self) -> None: ...


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


@runtime_checkable
class Collector(Protocol):
    """Runs a policy in a vector env and writes transitions into a buffer."""

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
