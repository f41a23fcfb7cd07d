"""Proportional prioritized experience replay (Schaul et al., 2016) for rlblocks buffers.

Transition ``i`` is sampled with probability ``P(i) = p_i**alpha / sum_k p_k**alpha`` where
``p_i = |td_error_i| + eps`` from its last learning step (new transitions get the largest
priority seen so far, so each is replayed at least about once). The bias this introduces is
corrected by importance weights ``w_i = (N * P(i))**-beta / max_k (N * P(k))**-beta =
(p_i**alpha / min_k p_k**alpha)**-beta``, which a learner multiplies into its per-sample loss
(``batch.weight``); ``beta`` is annealed from its start value to ``beta_final`` over
``beta_anneal_steps`` env steps (:meth:`PrioritizedSampling.set_env_step`).

Prioritisation is a sampling strategy, not a storage layout, so it is one mixin
(:class:`PrioritizedSampling`) over any rlblocks buffer: :class:`PrioritizedReplayBuffer` over the
base buffer, :class:`PrioritizedVectorReplayBuffer` over the per-env vector buffer. Episode links,
n-step and GAE returns, frame stacking and hdf5 files are the underlying buffer's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.batch import Batch
from rlblocks.buffer import ReplayBuffer
from rlblocks_buffer_prioritized.segment_tree import SumMinTree
from rlblocks_buffer_vector.buffer import VectorReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampling", "PrioritizedVectorReplayBuffer"]


class PrioritizedSampling:
    """Mixin that makes a :class:`~rlblocks.buffer.ReplayBuffer` (or subclass) sample by priority.

    Args (beside the buffer's own ``size, num_envs, stack_num, ignore_obs_next, seed``):
        alpha: how much prioritisation is used (0 = uniform).
        beta: importance-sampling exponent at the start (0 = no correction, 1 = full).
        beta_final: value ``beta`` reaches after ``beta_anneal_steps`` env steps.
        beta_anneal_steps: env steps of the linear annealing (0 keeps ``beta`` fixed).
        eps: added to ``|td_error|`` so that no transition gets priority 0.

    Every batch read from the buffer (``sample``, ``buf[index]``) carries ``weight`` (float32),
    the normalised importance weight of each transition. Learners report new priorities with
    :meth:`update_priority` (``BasePolicy.post_process_fn`` does it when the batch has
    ``td_error``).
    """

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_steps: int = 0,
        eps: float = 1e-6,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
    ) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if beta < 0 or beta_final < 0:
            raise ValueError(f"beta and beta_final must be >= 0, got {beta} and {beta_final}")
        if beta_anneal_steps < 0:
            raise ValueError(f"beta_anneal_steps must be >= 0, got {beta_anneal_steps}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 so that every transition can be sampled, got {eps}")
        super().__init__(size, num_envs, stack_num, ignore_obs_next, seed)  # type: ignore[call-arg]
        self.alpha = float(alpha)
        self.beta_start = float(beta)
        self.beta_final = float(beta_final)
        self.beta_anneal_steps = int(beta_anneal_steps)
        self.eps = float(eps)
        self.beta = self.beta_start
        self.env_step = 0
        self._tree = SumMinTree(self.maxsize)  # type: ignore[attr-defined]
        self._max_prio = 1.0  # largest |td_error| + eps seen: given to new transitions

    def _init_kwargs(self) -> dict[str, Any]:
        kwargs = super()._init_kwargs()  # type: ignore[misc]
        kwargs.update(
            alpha=self.alpha, beta=self.beta_start, beta_final=self.beta_final,
            beta_anneal_steps=self.beta_anneal_steps, eps=self.eps,
        )
        return kwargs

    # --- progress -------------------------------------------------------------------------------

    def set_env_step(self, env_step: int) -> None:
        """Told the number of env steps collected so far; anneals ``beta`` linearly to
        ``beta_final`` over ``beta_anneal_steps``."""
        self.env_step = int(env_step)
        if self.beta_anneal_steps == 0:
            return
        frac = min(1.0, self.env_step / self.beta_anneal_steps)
        self.beta = self.beta_start + frac * (self.beta_final - self.beta_start)

    # --- writing ------------------------------------------------------------------------------

    def add(
        self, batch: Batch | Mapping[str, Any], env_ids: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Add like the underlying buffer; the new transitions get the largest priority so far."""
        out = super().add(batch, env_ids)  # type: ignore[misc]
        if len(out[0]):
            # the slots add() returns are fresh int64 arrays in range
            self._tree._set_owned(out[0], np.array([self._max_prio**self.alpha]))
        return out

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Append ``other`` like the underlying buffer, at the largest priority so far."""
        pos = super().update(other)  # type: ignore[misc]
        if len(pos):
            self._tree.set(pos, self._max_prio**self.alpha)
        return pos

    def update_priority(self, index: Any, td_error: Any) -> None:
        """Set the priority of slots ``index`` to ``|td_error| + eps`` (``td_error``: ``[B]``, or
        ``[B, ...]`` averaged over the trailing axes; a tensor is moved to the CPU)."""
        if (type(td_error) is np.ndarray and type(index) is np.ndarray and td_error.ndim == 1
                and index.dtype == np.int64 and index.shape == td_error.shape):
            # the common case (a learner's [B] errors for the sampled [B] slots), checked cheaply
            prio = np.abs(td_error, dtype=np.float64)
            prio += self.eps
            self._max_prio = max(self._max_prio, float(prio.max(initial=0.0)))
            self._tree._set_owned(index, prio**self.alpha)
            return
        if hasattr(td_error, "detach"):
            td_error = td_error.detach().cpu().numpy()
        err = np.abs(np.asarray(td_error, dtype=np.float64))
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if err.ndim > 1:
            err = err.reshape(len(err), -1).mean(axis=1)
        if err.shape != index.shape:
            raise ValueError(
                f"update_priority got {err.shape[0] if err.ndim else 1} td errors for "
                f"{len(index)} indices; pass one per sampled index"
            )
        prio = err + self.eps
        self._max_prio = max(self._max_prio, float(prio.max(initial=0.0)))
        self._tree.set(index, prio**self.alpha)

    def reset(self, keep_statistics: bool = False) -> None:
        super().reset(keep_statistics)  # type: ignore[misc]
        self._tree.clear()
        self._max_prio = 1.0

    # --- reading ------------------------------------------------------------------------------

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0``: slots drawn with probability proportional to ``priority**alpha``
        (stratified: one draw from each of ``batch_size`` equal slices of the total, so a batch
        covers the distribution evenly); ``0``: every valid slot in time order; ``< 0``: empty."""
        if batch_size <= 0:
            return super().sample_index(batch_size)  # type: ignore[misc]
        if len(self) == 0:  # type: ignore[arg-type]
            raise ValueError("cannot sample from an empty buffer; add transitions first")
        total = self._tree.total()
        u = self._rng.random(batch_size)  # type: ignore[attr-defined]
        u += np.arange(batch_size)
        u *= total / batch_size
        return self._tree._find_owned(u)

    def weight(self, index: Any) -> np.ndarray:
        """Normalised importance weights ``(p_i**alpha / min_k p_k**alpha)**-beta`` of slots
        ``index`` (float32, at most 1)."""
        p = self._tree.leaves[index]
        w = np.minimum((p / self._tree.min()) ** -self.beta, 1.0)  # the float32 min may round up
        return w.astype(np.float32)

    def __getitem__(self, index: Any) -> Batch:
        """Transitions as for the underlying buffer, plus their importance ``weight``."""
        batch = super().__getitem__(index)  # type: ignore[misc]
        batch.weight = self.weight(self._resolve(index))  # type: ignore[attr-defined]
        return batch

    # --- files ----------------------------------------------------------------------------------

    def _write_hdf5(self, f: Any, compression: str | None) -> None:
        super()._write_hdf5(f, compression)  # type: ignore[misc]
        f["meta"].create_dataset("priority", data=self._tree.leaves)
        f.attrs["max_priority"] = self._max_prio
        f.attrs["env_step"] = self.env_step

    def _read_hdf5(self, f: Any) -> None:
        super()._read_hdf5(f)  # type: ignore[misc]
        prio = np.asarray(f["meta"]["priority"][()], dtype=np.float64)
        if prio.shape != (self._tree.capacity,):
            raise ValueError(f"hdf5 priorities have shape {prio.shape}, expected "
                             f"({self._tree.capacity},)")
        self._tree.clear()
        set_ = np.flatnonzero(prio > 0)
        self._tree.set(set_, prio[set_])
        self._max_prio = float(f.attrs["max_priority"])
        self.set_env_step(int(f.attrs["env_step"]))


class PrioritizedReplayBuffer(PrioritizedSampling, ReplayBuffer):
    """Prioritized replay over the base buffer (one circular storage shared by all envs)."""


class PrioritizedVectorReplayBuffer(PrioritizedSampling, VectorReplayBuffer):
    """Prioritized replay over the vector buffer (one circular sub-buffer per env); the buffer
    that ``buffer="prioritized"`` builds."""
