"""A vectorised k-ary segment tree holding both the sum and the minimum of its leaves.

Prioritized replay needs three operations on ``N`` priorities, each for a whole batch at once:
set some leaves, find the leaves where random prefix sums fall (proportional sampling), and the
minimum priority (for importance weights). A binary tree takes ``log2 N`` (17 for 1e5) rounds of
small numpy calls per operation; with ``FANOUT = 32`` children per node it takes ``log32 N`` (4),
and each round works on ``[batch, 32]`` blocks, which numpy does in one call. Levels are stored
as separate arrays, root level first: level ``d`` has ``FANOUT**d`` nodes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SumMinTree"]

FANOUT = 32
_UPPER = np.triu(np.ones((FANOUT, FANOUT)))  # x @ _UPPER: cumulative sums along the rows of x


class SumMinTree:
    """Sum and min over ``capacity`` non-negative leaves (float64), updated and searched in batches.

    Leaves that were never set hold 0 for the sum (never sampled) and +inf for the min (ignored).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        depth = 1
        while FANOUT**depth < capacity:
            depth += 1
        self.depth = depth
        # level d (0 = root .. depth = leaves) holds FANOUT children for each node of level
        # d - 1 that covers a leaf below `capacity`: about 1.03 * capacity floats, not FANOUT**depth
        sizes = [1] + [
            -(-capacity // FANOUT ** (depth - d + 1)) * FANOUT for d in range(1, depth + 1)
        ]
        self._sum = [np.zeros(n) for n in sizes]
        self._min = [np.full(n, np.inf) for n in sizes]
        self._pending: list[np.ndarray] = []  # leaf indices set since the last read
        self._num_pending = 0

    @property
    def leaves(self) -> np.ndarray:
        """``[capacity]`` view of the leaf values (read-only by convention: use :meth:`set`)."""
        return self._sum[-1][: self.capacity]

    def total(self) -> float:
        """Sum of all leaves."""
        self._flush()
        return float(self._sum[0][0])

    def min(self) -> float:
        """Smallest leaf that was set (+inf when none)."""
        self._flush()
        return float(self._min[0][0])

    def set(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (repeated indices: the last one wins).

        Only the leaves are written here; inner nodes are brought up to date by the next read
        (:meth:`total`, :meth:`min`, :meth:`find_prefix_sum`), so the many small sets of a
        collection loop (a few slots per env step) cost one tree walk per sampled batch."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        self._sum[-1][index] = value
        self._min[-1][index] = value
        self._pending.append(index)
        self._num_pending += len(index)

    def _flush(self) -> None:
        """Recompute the inner nodes above the leaves set since the last read."""
        if not self._pending:
            return
        index = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        many = self._num_pending * FANOUT > self.capacity
        self._pending = []
        self._num_pending = 0
        if many:  # cheaper to recompute everything
            self.rebuild()
            return
        for d in range(self.depth - 1, -1, -1):
            index = index // FANOUT
            self._sum[d][index] = self._sum[d + 1].reshape(-1, FANOUT)[index].sum(axis=1)
            self._min[d][index] = self._min[d + 1].reshape(-1, FANOUT)[index].min(axis=1)

    def clear(self) -> None:
        """Reset every leaf to unset."""
        self._pending = []
        self._num_pending = 0
        for s, m in zip(self._sum, self._min):
            s[:] = 0.0
            m[:] = np.inf

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves (after many leaves changed)."""
        self._pending = []
        self._num_pending = 0
        for d in range(self.depth - 1, -1, -1):
            n = len(self._sum[d + 1]) // FANOUT
            self._sum[d][:n] = self._sum[d + 1].reshape(-1, FANOUT).sum(axis=1)
            self._min[d][:n] = self._min[d + 1].reshape(-1, FANOUT).min(axis=1)

    def find_prefix_sum(self, value: np.ndarray) -> np.ndarray:
        """For each ``value`` in ``[0, total)`` the leaf ``i`` with
        ``sum(leaves[:i]) <= value < sum(leaves[:i + 1])``; never a zero leaf."""
        self._flush()
        value = np.array(value, dtype=np.float64, copy=True).reshape(-1)
        node = np.zeros(value.shape, dtype=np.int64)
        rows = np.arange(len(node))
        for d in range(1, self.depth + 1):
            block = self._sum[d].reshape(-1, FANOUT)[node]  # [B, FANOUT] children's sums
            csum = block @ _UPPER  # row-wise cumulative sums; np.cumsum(axis=1) is ~10x slower
            child = np.count_nonzero(csum <= value[:, None], axis=1)
            np.minimum(child, FANOUT - 1, out=child)
            picked = block[rows, child]
            empty = picked == 0
            if empty.any():  # rounding pointed past the last non-empty child: stay on it
                last = FANOUT - 1 - np.argmax(block[empty][:, ::-1] > 0, axis=1)
                child[empty] = last
                picked = block[rows, child]
            value -= csum[rows, child] - picked
            node = node * FANOUT + child
        return node
