"""The parts a replay buffer is composed of: storage x layout x sampler (+ relabeller, writer).

A :class:`~rlblocks.replay.ReplayBuffer` is one object made of independent parts, each chosen
by name (``rlblocks.make_buffer("vector", size=..., sampler="prioritized", relabel="her",
storage="memmap", path="buf/")``, or ``--set buffer.sampler=prioritized`` on the command line)
or passed as an object:

* **storage**: where the key arrays live, ``"memory"`` (numpy arrays in RAM) or ``"memmap"``
  (``.npy`` files mapped into memory; may exceed RAM, survives a crash after ``flush()``). The
  buffer itself implements both, and writes and reads hdf5 files (``save_hdf5``,
  ``ReplayBuffer.load_hdf5``).
* **layout** (:class:`Layout`): which slot each env's step goes to and the episode structure
  over the slots (``prev`` / ``next`` links, running episode statistics). Core's
  :class:`~rlblocks.replay.SharedRing` (``"replay"``); the per-env sub-buffers of
  ``rlblocks-buffer-vector`` (``"vector"``).
* **sampler** (:class:`Sampler`): which valid slots a ``sample`` draws. Core's
  :class:`UniformSampler` (``"uniform"``) and :class:`SequenceSampler` (``"sequence"``:
  fixed-length windows inside episodes, with a mask, for recurrent learners); prioritized replay
  is the ``rlblocks-buffer-prioritized`` plugin.
* **relabeller** (:class:`Relabeller`): rewrites sampled rows without touching the stored data
  (hindsight goals: ``rlblocks-buffer-her``).
* **writer** (:class:`Writer`): what an ``add`` admits and when (``rlblocks-buffer-cached``
  admits only whole episodes). Without one, every step is written as it comes.

Every part is registered in the ``rlblocks.buffers`` entry-point group with a
:class:`~rlblocks.plugins.BufferSpec` whose ``part`` says which of the four it is, and
builds only on the public API of this module and of :class:`~rlblocks.replay.ReplayBuffer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from rlblocks.contracts import Batch
    from rlblocks.replay._buffer import ReplayBuffer

__all__ = [
    "PARTS",
    "AnnealedSampler",
    "EnvAttachedPart",
    "Layout",
    "PrioritySampler",
    "Relabeller",
    "Sampler",
    "SequenceSampler",
    "UniformSampler",
    "Writer",
]

#: The kinds of buffer part, as a :class:`~rlblocks.plugins.BufferSpec` names them, and the
#: ``make_buffer`` keyword (and ``buffer.*`` config field) that chooses each.
PARTS = {"layout": "layout", "sampler": "sampler", "relabeller": "relabel", "writer": "writer"}


@runtime_checkable
class Layout(Protocol):
    """Where rows go and how they link into episodes (see :mod:`rlblocks.replay`).

    Built as ``Layout(size, num_envs, **options)``; ``maxsize`` may be smaller than ``size``
    (the per-env layout rounds it to whole sub-buffers). ``env_range`` is
    ``arange(num_envs)``; the buffer passes that very object as ``envs`` for a step of every env
    in id order, so a layout can take a faster path by identity."""

    name: str
    maxsize: int
    num_envs: int
    size: int
    env_range: np.ndarray

    def options(self) -> dict[str, Any]:
        """Constructor options beyond ``size`` and ``num_envs`` (recorded in buffer files)."""
        ...

    def bind(self, terminated: np.ndarray, truncated: np.ndarray, rew: np.ndarray) -> None:
        """The storage exists (or was reopened): its done flags and rewards ``[maxsize, ...]``."""
        ...

    def write(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one validated step of ``n`` envs (``(storage array, value)`` pairs) and advance
        links and statistics; return ``(index, ep_rew, ep_len, ep_start)`` as ``add`` does."""
        ...

    def extend(
        self, columns: list[tuple[np.ndarray, np.ndarray]], envs: np.ndarray, rew: np.ndarray,
        done: np.ndarray,
    ) -> np.ndarray:
        """Append rows in time order as if added one by one; return the slots holding them."""
        ...

    def reset(self, keep_statistics: bool = False) -> None: ...

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray: ...

    def prev(self, index: Any) -> np.ndarray: ...

    def next(self, index: Any) -> np.ndarray: ...

    @property
    def env_id(self) -> np.ndarray: ...

    def unfinished_index(self) -> np.ndarray: ...

    def time_order(self) -> np.ndarray:
        """Every valid slot in the order ``sample_index(0)`` lists them."""
        ...

    def valid_slots(self) -> Any: ...

    def uniform(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """``batch_size`` uniformly random valid slots."""
        ...

    def steps_after(self, index: np.ndarray) -> np.ndarray:
        """How many later steps of the same episode are stored after each slot."""
        ...

    def advance(self, index: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The slot ``steps`` later in the same episode (``steps <= steps_after(index)``)."""
        ...

    def state(self) -> dict[str, Any]: ...

    def arrays(self) -> dict[str, np.ndarray]: ...

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None: ...


@runtime_checkable
class Sampler(Protocol):
    """Draws slots to replay. ``bind`` is called once by the buffer it belongs to;
    ``on_write`` with the slots of every add or extend (new valid transitions); ``on_reset``
    when the buffer forgets everything. ``columns(index)`` adds per-row columns to every batch
    read from the buffer (importance ``weight``, a sequence ``mask``); ``{}`` for none."""

    name: str

    def bind(self, buffer: ReplayBuffer) -> None: ...

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0`` slots (``[B]``, or ``[B, L]`` for windows)."""
        ...

    def on_write(self, slots: np.ndarray) -> None: ...

    def on_reset(self) -> None: ...

    def columns(self, index: Any) -> dict[str, np.ndarray]: ...

    def options(self) -> dict[str, Any]: ...

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What buffer files keep of the sampler: scalars and arrays."""
        ...

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None: ...


@runtime_checkable
class PrioritySampler(Protocol):
    """A sampler that takes new priorities after learning (``td_error [B]`` per sampled slot)."""

    def update_priority(self, index: np.ndarray, td_error: Any) -> None: ...


@runtime_checkable
class AnnealedSampler(Protocol):
    """A sampler that changes with training progress; told the env step before each update."""

    def set_env_step(self, env_step: int) -> None: ...


@runtime_checkable
class Relabeller(Protocol):
    """Rewrites sampled rows (in place) without changing what is stored; ``view`` gives a
    buffer-like view in which reads along each sampled row's episode see its rewritten data, so
    n-step and GAE targets agree with the batch."""

    name: str

    def bind(self, buffer: ReplayBuffer) -> None: ...

    def relabel(self, batch: Batch, indices: np.ndarray) -> None: ...

    def view(self, batch: Batch, indices: np.ndarray) -> Any: ...

    def options(self) -> dict[str, Any]: ...


@runtime_checkable
class EnvAttachedPart(Protocol):
    """A part that needs the env's own functions (a goal env's ``compute_reward``)."""

    def attach_env(self, env: Any) -> Any: ...


@runtime_checkable
class Writer(Protocol):
    """Decides what an ``add`` writes and when. ``add`` takes what ``ReplayBuffer.add`` takes
    and returns what it returns; it writes through the buffer's :meth:`~ReplayBuffer.write`
    (one step) and :meth:`~ReplayBuffer.extend` (rows in bulk)."""

    name: str

    def bind(self, buffer: ReplayBuffer) -> None: ...

    def add(
        self, batch: Any, env_ids: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

    def reset(self, keep_statistics: bool = False) -> None: ...

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray:
        """End the episodes the writer holds back (those of the envs ``env_ids``; None: all) as
        truncated and admit them."""
        ...

    def options(self) -> dict[str, Any]: ...

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None: ...


class _NoState:
    """Parts without options or state to keep."""

    def options(self) -> dict[str, Any]:
        return {}

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {}, {}

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        return None


class UniformSampler(_NoState):
    """Every valid transition equally likely, with replacement (the default sampler)."""

    name = "uniform"

    def __init__(self) -> None:
        self.buffer: ReplayBuffer | None = None

    def bind(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer

    def sample_index(self, batch_size: int) -> np.ndarray:
        buf = self.buffer
        assert buf is not None
        return buf.layout.uniform(buf.rng, batch_size)

    def on_write(self, slots: np.ndarray) -> None:
        return None

    def on_reset(self) -> None:
        return None

    def columns(self, index: Any) -> dict[str, np.ndarray]:
        return {}


class SequenceSampler(_NoState):
    """Fixed-length windows of consecutive steps inside one episode, for recurrent learners.

    ``sample(B)`` returns a batch of shape ``[B, length, ...]``: each window starts at a
    uniformly drawn valid slot and follows ``next`` for ``length`` steps; where the episode ends
    (or its newest stored step is reached) first, the window repeats that last slot and
    ``mask[b, t]`` is False from there on. ``mask`` is part of every batch read with a ``[B, L]``
    index. With ``start="episode"`` windows start only at an episode's first stored step
    (whole-episode prefixes, for learners that replay from a zero state).

    ``burn_in`` steps come first in every window (windows are ``burn_in + length`` long): a
    recurrent learner runs them only to warm its state up (R2D2's burn-in) and learns on the
    rest, which the ``learn_mask`` column marks (``mask`` and not within the burn-in); an episode
    that starts inside a burn-in shifts its window so that it starts at the episode's first step.
    """

    name = "sequence"

    def __init__(self, length: int = 16, start: str = "any", burn_in: int = 0) -> None:
        if int(length) < 1:
            raise ValueError(f"sequence length must be >= 1, got {length}")
        if int(burn_in) < 0:
            raise ValueError(f"burn_in must be >= 0, got {burn_in}")
        if start not in ("any", "episode"):
            raise ValueError(f"start must be 'any' or 'episode', got {start!r}")
        self.length = int(length)
        self.burn_in = int(burn_in)
        self.start = start
        self.buffer: ReplayBuffer | None = None
        self._firsts: np.ndarray | None = None  # episode starts, found again after a write

    def options(self) -> dict[str, Any]:
        return {"length": self.length, "start": self.start, "burn_in": self.burn_in}

    def bind(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer

    def _starts(self, batch_size: int) -> np.ndarray:
        buf = self.buffer
        assert buf is not None
        if self.start == "any":
            return buf.layout.uniform(buf.rng, batch_size)
        if self._firsts is None:  # one scan of the buffer per write, not per sample
            slots = np.asarray(buf.layout.time_order(), dtype=np.int64)
            self._firsts = slots[np.asarray(buf.prev(slots)) == slots]
        return self._firsts[buf.rng.integers(len(self._firsts), size=batch_size)]

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``[B, burn_in + length]`` slots: each row a window along ``next`` (the last slot
        repeating), its first learned step drawn as :meth:`_starts` says and ``burn_in`` steps
        before it along ``prev`` where the episode has them."""
        buf = self.buffer
        assert buf is not None
        cur = self._starts(batch_size)
        for _ in range(self.burn_in):  # back into the episode, at most to its first step
            cur = np.asarray(buf.prev(cur), dtype=np.int64)
        out = np.empty((batch_size, self.burn_in + self.length), dtype=np.int64)
        out[:, 0] = cur
        for t in range(1, out.shape[1]):
            cur = np.asarray(buf.next(cur), dtype=np.int64)
            out[:, t] = cur
        return out

    def on_write(self, slots: np.ndarray) -> None:
        self._firsts = None

    def on_reset(self) -> None:
        self._firsts = None

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._firsts = None  # the buffer was read from a file

    def columns(self, index: Any) -> dict[str, np.ndarray]:
        """For window indices: ``mask [B, L]``, True up to each window's last real step, and
        with a burn-in ``learn_mask``, the masked steps after the first ``burn_in``."""
        idx = np.asarray(index)
        if idx.ndim != 2:
            return {}
        mask = np.ones(idx.shape, dtype=bool)
        mask[:, 1:] = idx[:, 1:] != idx[:, :-1]
        mask = np.logical_and.accumulate(mask, axis=1)
        if not self.burn_in:
            return {"mask": mask}
        learn = mask.copy()
        learn[:, : self.burn_in] = False
        return {"mask": mask, "learn_mask": learn}


# --- composition by name ------------------------------------------------------------------------

#: ``make_buffer`` keyword of each part kind -> the ``part`` its spec must declare
_KEYWORD_PART = {v: k for k, v in PARTS.items()}


def resolve_part_names(
    name: str, sampler: str | None = None, relabel: str | None = None,
    writer: str | None = None, lookup: Any = None,
) -> dict[str, str]:
    """``{keyword: registry name}`` of every part of a buffer named ``name`` with the given
    sampler, relabeller and writer (keywords ``layout, sampler, relabel, writer``).

    ``name`` may name a layout, or another part that then goes on its spec's
    ``default_layout``. Raises :class:`~rlblocks.contracts.ConfigError` for a name that is the
    wrong kind of part, or two names for one part."""
    from rlblocks.contracts import ConfigError

    if lookup is None:
        from rlblocks.plugins import get_registry

        def lookup(kind: str, n: str) -> Any:
            return get_registry(kind).spec(n)

    chosen: dict[str, str | None] = {"layout": None, "sampler": sampler, "relabel": relabel,
                                     "writer": writer}
    spec = lookup("buffer", name)
    keyword = PARTS[spec.part]
    if keyword == "layout":
        chosen["layout"] = name
    else:
        given = chosen[keyword]
        if given is not None and given != name:
            raise ConfigError(
                f"buffer {name!r} is a {spec.part} and {keyword}={given!r} names another; name a "
                f"layout as the buffer (e.g. 'vector') and the {spec.part} with {keyword}="
            )
        chosen[keyword] = name
        chosen["layout"] = spec.default_layout or "replay"
    if chosen["sampler"] is None:
        chosen["sampler"] = "uniform"
    out: dict[str, str] = {}
    for kw, part_name in chosen.items():
        if part_name is None:
            continue
        part_spec = spec if part_name == name else lookup("buffer", part_name)
        if part_spec.part != _KEYWORD_PART[kw]:
            raise ConfigError(
                f"buffer part {part_name!r} is a {part_spec.part}, not a {_KEYWORD_PART[kw]}; "
                f"pass it as {PARTS[part_spec.part]}={part_name!r}"
            )
        out[kw] = part_name
    return out


def build_part(
    keyword: str, name: str, options: dict[str, Any], size: int = 0, num_envs: int = 1
) -> Any:
    """Build one registered part (``keyword`` as in :func:`resolve_part_names`)."""
    from rlblocks.plugins import get_registry

    reg = get_registry("buffer")
    spec = reg.spec(name)
    if spec.part != _KEYWORD_PART[keyword]:
        from rlblocks.contracts import ConfigError

        raise ConfigError(f"buffer part {name!r} is a {spec.part}, not a {_KEYWORD_PART[keyword]}")
    impl = reg.load(name)
    part = impl(int(size), int(num_envs), **options) if keyword == "layout" else impl(**options)
    part.name = name  # the name buffer files record: the one it was built by
    return part
