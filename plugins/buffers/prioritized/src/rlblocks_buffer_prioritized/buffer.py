"""Proportional prioritized experience replay (Schaul et al., 2016): a sampler for rlblocks buffers.

Transition ``i`` is sampled with probability ``P(i) = p_i**alpha / sum_k p_k**alpha`` where
``p_i = |td_error_i| + eps`` from its last learning step (new transitions get the largest
priority seen so far, so each is replayed at least about once). The bias this introduces is
corrected by importance weights ``w_i = (N * P(i))**-beta / max_k (N * P(k))**-beta =
(p_i**alpha / min_k p_k**alpha)**-beta``, which a learner multiplies into its per-sample loss
(``batch.weight``); ``beta`` is annealed from its start value to ``beta_final`` over
``beta_anneal_steps`` env steps (:meth:`PrioritizedSampler.set_env_step`).

Prioritisation is a sampling strategy, not a storage layout, so it is one
:class:`~rlblocks.replay.Sampler` (:class:`PrioritizedSampler`, registered as
``"prioritized"``) that goes on any layout, with any relabeller, writer and storage:
``make_buffer("vector", ..., sampler="prioritized", alpha=0.6)``. Episode links, n-step and GAE
returns, frame stacking and files are the buffer's; the priorities travel in its files.
:class:`PrioritizedReplayBuffer` and :class:`PrioritizedVectorReplayBuffer` are presets.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlblocks.replay import Relabeller, ReplayBuffer, Writer
from rlblocks_buffer_prioritized.segment_tree import SumMinTree
from rlblocks_buffer_vector.buffer import PerEnvLayout

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampler", "PrioritizedVectorReplayBuffer"]


class PrioritizedSampler:
    """Samples slots with probability proportional to ``priority**alpha``.

    Args:
        alpha: how much prioritisation is used (0 = uniform).
        beta: importance-sampling exponent at the start (0 = no correction, 1 = full).
        beta_final: value ``beta`` reaches after ``beta_anneal_steps`` env steps.
        beta_anneal_steps: env steps of the linear annealing (0 keeps ``beta`` fixed).
        eps: added to ``|td_error|`` so that no transition gets priority 0.

    Every batch read from its buffer (``sample``, ``buf[index]``) carries ``weight`` (float32),
    the normalised importance weight of each transition. Learners report new priorities with
    ``buffer.update_priority`` (``BasePolicy.post_process_fn`` does it when the batch has
    ``td_error``).
    """

    name = "prioritized"

    def __init__(
        self,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_steps: int = 0,
        eps: float = 1e-6,
    ) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if beta < 0 or beta_final < 0:
            raise ValueError(f"beta and beta_final must be >= 0, got {beta} and {beta_final}")
        if beta_anneal_steps < 0:
            raise ValueError(f"beta_anneal_steps must be >= 0, got {beta_anneal_steps}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0 so that every transition can be sampled, got {eps}")
        self.alpha = float(alpha)
        self.beta_start = float(beta)
        self.beta_final = float(beta_final)
        self.beta_anneal_steps = int(beta_anneal_steps)
        self.eps = float(eps)
        self.beta = self.beta_start
        self.env_step = 0
        self.buffer: ReplayBuffer | None = None
        self._tree: SumMinTree | None = None
        self._max_prio = 1.0  # largest |td_error| + eps seen: given to new transitions

    def bind(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
        self._tree = SumMinTree(buffer.maxsize)

    def options(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "beta": self.beta_start, "beta_final": self.beta_final,
                "beta_anneal_steps": self.beta_anneal_steps, "eps": self.eps}

    @property
    def tree(self) -> SumMinTree:
        """The sum/min tree of ``priority**alpha`` per slot."""
        assert self._tree is not None, "the sampler is not bound to a buffer yet"
        return self._tree

    # --- progress -------------------------------------------------------------------------------

    def set_env_step(self, env_step: int) -> None:
        """Told the number of env steps collected so far; anneals ``beta`` linearly to
        ``beta_final`` over ``beta_anneal_steps``."""
        self.env_step = int(env_step)
        if self.beta_anneal_steps == 0:
            return
        frac = min(1.0, self.env_step / self.beta_anneal_steps)
        self.beta = self.beta_start + frac * (self.beta_final - self.beta_start)

    # --- the buffer's notices -------------------------------------------------------------------

    def on_write(self, slots: np.ndarray) -> None:
        """New transitions get the largest priority so far."""
        if len(slots):
            self.tree._set_owned(slots, np.array([self._max_prio**self.alpha]))

    def on_reset(self) -> None:
        self.tree.clear()
        self._max_prio = 1.0

    def update_priority(self, index: Any, td_error: Any) -> None:
        """Set the priority of slots ``index`` to ``|td_error| + eps`` (``td_error``: ``[B]``, or
        ``[B, ...]`` averaged over the trailing axes; a tensor is moved to the CPU)."""
        tree = self.tree
        if (type(td_error) is np.ndarray and type(index) is np.ndarray and td_error.ndim == 1
                and index.dtype == np.int64 and index.shape == td_error.shape):
            # the common case (a learner's [B] errors for the sampled [B] slots), checked cheaply
            prio = np.abs(td_error, dtype=np.float64)
            prio += self.eps
            self._max_prio = max(self._max_prio, float(prio.max(initial=0.0)))
            tree._set_owned(index, prio**self.alpha)
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
        tree.set(index, prio**self.alpha)

    # --- sampling -------------------------------------------------------------------------------

    def sample_index(self, batch_size: int) -> np.ndarray:
        """Slots drawn with probability proportional to ``priority**alpha``, stratified: one
        draw from each of ``batch_size`` equal slices of the total, so a batch covers the
        distribution evenly."""
        assert self.buffer is not None
        return self.tree._find_stratified_owned(self.buffer.rng.random(batch_size))

    def weight(self, index: Any) -> np.ndarray:
        """Normalised importance weights ``(p_i**alpha / min_k p_k**alpha)**-beta`` of slots
        ``index`` (float32, at most 1)."""
        tree = self.tree
        if type(index) is np.ndarray and index.dtype == np.int64 and index.ndim == 1:
            # what every sampled batch reads: the same, in place on one fresh array
            w = tree.leaves.take(index)
            w /= tree.min()
            np.power(w, -self.beta, out=w)
            np.minimum(w, 1.0, out=w)
            return w.astype(np.float32)
        p = tree.leaves[index]
        w = np.minimum((p / tree.min()) ** -self.beta, 1.0)  # the float32 min may round up
        return w.astype(np.float32)

    def columns(self, index: Any) -> dict[str, np.ndarray]:
        """``weight`` for every batch read from the buffer."""
        return {"weight": self.weight(index)}

    # --- files ----------------------------------------------------------------------------------

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return ({"max_priority": self._max_prio, "env_step": self.env_step},
                {"priority": self.tree.leaves})

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        tree = self.tree
        prio = np.asarray(arrays["priority"], dtype=np.float64)
        if prio.shape != (tree.capacity,):
            raise ValueError(f"saved priorities have shape {prio.shape}, expected "
                             f"({tree.capacity},)")
        tree.clear()
        set_ = np.flatnonzero(prio > 0)
        tree.set(set_, prio[set_])
        self._max_prio = float(state["max_priority"])
        self.set_env_step(int(state["env_step"]))


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`~rlblocks.replay.ReplayBuffer` with the shared-ring layout and the prioritized
    sampler (arguments: the sampler's, then the buffer's)."""

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
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        *,
        relabel: Relabeller | None = None,
        writer: Writer | None = None,
    ) -> None:
        sampler = PrioritizedSampler(alpha, beta, beta_final, beta_anneal_steps, eps)
        super().__init__(
            size, num_envs, stack_num, ignore_obs_next, seed, storage, path,
            sampler=sampler, relabel=relabel, writer=writer,
        )

    def weight(self, index: Any) -> np.ndarray:
        """Importance weights of slots ``index`` (see :meth:`PrioritizedSampler.weight`)."""
        return self.sampler.weight(index)  # type: ignore[attr-defined]

    @property
    def beta(self) -> float:
        """The sampler's current importance-sampling exponent."""
        return self.sampler.beta  # type: ignore[attr-defined]


class PrioritizedVectorReplayBuffer(PrioritizedReplayBuffer):
    """The same over the per-env layout (one circular sub-buffer per env)."""

    default_layout = PerEnvLayout
