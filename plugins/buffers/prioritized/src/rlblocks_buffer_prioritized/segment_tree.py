"""A segment tree with 8 children per node, holding both the sum and the minimum of its leaves.

Prioritized replay needs three operations on ``N`` priorities, each for a whole batch at once:
set some leaves, find the leaves where random prefix sums fall (proportional sampling), and the
minimum priority (for importance weights). The tree keeps its levels one after another in two
flat arrays (sum and min): level 0 holds the leaves, and node ``p`` of level ``l + 1`` sums the
block ``[p * 8, p * 8 + 8)`` of level ``l`` (each level is padded to whole blocks; the top level is
the root).

Why 8 children rather than 2: a walk from the root to a leaf touches ``log8 N`` blocks of eight
neighbouring values (one or two cache lines each) instead of ``log2 N`` scattered ones. For 1e5
leaves that is 6 levels instead of 17, and the tree takes 12 bytes per leaf (8 for the float64
sums, 4 for the float32 mins, plus an eighth for the inner levels) instead of the 24 of a binary
tree padded to a power of two.

Both batched walks (``B`` leaves up to the root after a set, ``B`` prefix sums down to a leaf) run
level by level over the whole batch, so the loads of one level overlap their cache misses. With
numba they are compiled loops; without it, the same level-by-level rounds as numpy calls vectorised
over the batch (slower, but correct and dependency-free).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SumMinTree"]

try:  # pragma: no cover - exercised by whichever of the two is installed
    from numba import njit
except ImportError:  # pragma: no cover
    njit = None

K = 8  # children per node


def _set_py(total: np.ndarray, least: np.ndarray, starts: np.ndarray, index: np.ndarray,
            value: np.ndarray) -> None:
    """Write leaves and recompute their ancestors, one level per round (numpy fallback)."""
    total[index] = value
    least[index] = value
    node = np.unique(index) // K
    block = np.arange(K)
    for level in range(1, len(starts)):
        children = starts[level - 1] + node[:, None] * K + block
        total[starts[level] + node] = total[children].sum(axis=1)
        least[starts[level] + node] = least[children].min(axis=1)
        node = np.unique(node // K)


def _find_py(total: np.ndarray, starts: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Descend from the root for every value at once (numpy fallback); never picks a zero leaf."""
    node = np.zeros(value.shape, dtype=np.int64)
    rows = np.arange(len(value))
    block = np.arange(K)
    for level in range(len(starts) - 2, -1, -1):
        sums = total[starts[level] + node[:, None] * K + block]  # [B, K]
        cum = np.cumsum(sums, axis=1)
        pick = np.count_nonzero(cum <= value[:, None], axis=1)  # skips empty children too
        past = pick == K  # rounding went past the last non-empty child: take that child
        if past.any():
            pick[past] = K - 1 - np.argmax(sums[past][:, ::-1] > 0, axis=1)
        before = np.where(pick > 0, cum[rows, np.maximum(pick - 1, 0)], 0.0)
        value = np.where(past, 0.0, value - before)
        node = node * K + pick
    return node


if njit is not None:

    @njit(cache=True, nogil=True)
    def _set_nb(total, least, starts, index, value):  # type: ignore[no-untyped-def]
        scalar = value.shape[0] == 1
        node = np.empty(index.shape[0], dtype=np.int64)
        for j in range(index.shape[0]):
            i = index[j]
            v = value[0] if scalar else value[j]
            total[i] = v
            least[i] = v
            node[j] = i // 8
        for level in range(1, starts.shape[0]):  # every walk is at the same depth
            src, dst = starts[level - 1], starts[level]
            done = -1
            for j in range(node.shape[0]):
                p = node[j]
                node[j] = p // 8
                if p == done:  # the walk before recomputed this node (sampled slots come
                    continue  # sorted, so near the root most walks share their nodes)
                done = p
                b = src + p * 8
                s = total[b]
                m = least[b]
                for c in range(1, 8):
                    s += total[b + c]
                    m = min(m, least[b + c])
                total[dst + p] = s
                least[dst + p] = m

    @njit(cache=True, nogil=True)
    def _find_nb(total, starts, value):  # type: ignore[no-untyped-def]
        # Branch-free inside a block: the child is the count of inclusive prefix sums <= v (as
        # in _find_py; empty children left of it count too, so it is never empty). An early
        # exit on random draws mispredicts about once per level, and a running sum is a chain
        # of 8 dependent adds; the prefix sums below are a chain of 5. Each c_i is c_(i-1) + x_i
        # or c_(i-2) + (x_(i-1) + x_i), so they never decrease and an empty child's equals the
        # one before it exactly: the pick can never be an empty child.
        node = np.zeros(value.shape[0], dtype=np.int64)
        for level in range(starts.shape[0] - 2, -1, -1):
            s0 = starts[level]
            for j in range(value.shape[0]):
                b = s0 + node[j] * 8
                v = value[j]
                x0, x1, x2, x3 = total[b], total[b + 1], total[b + 2], total[b + 3]
                x4, x5, x6, x7 = total[b + 4], total[b + 5], total[b + 6], total[b + 7]
                c1 = x0 + x1
                c2 = c1 + x2
                c3 = c1 + (x2 + x3)
                c4 = c3 + x4
                c5 = c3 + (x4 + x5)
                c6 = c5 + x6
                c7 = c6 + x7
                pick = ((x0 <= v) + (c1 <= v) + (c2 <= v) + (c3 <= v)
                        + (c4 <= v) + (c5 <= v) + (c6 <= v) + (c7 <= v))
                if pick == 8:  # rounding went past the last non-empty child: take that child
                    pick = 7
                    while pick > 0 and total[b + pick] <= 0.0:
                        pick -= 1
                    v = 0.0
                else:  # minus the prefix sum left of the pick (selects, not branches)
                    before = x0 if x0 <= v else 0.0
                    before = c1 if c1 <= v else before
                    before = c2 if c2 <= v else before
                    before = c3 if c3 <= v else before
                    before = c4 if c4 <= v else before
                    before = c5 if c5 <= v else before
                    before = c6 if c6 <= v else before
                    v -= before
                value[j] = v
                node[j] = node[j] * 8 + pick
        return node

    @njit(cache=True, nogil=True)
    def _find_stratified_nb(total, starts, u):  # type: ignore[no-untyped-def]
        n = u.shape[0]
        scale = total[starts[-1]] / n
        for j in range(n):
            u[j] = (u[j] + j) * scale
        return _find_nb(total, starts, u)


class SumMinTree:
    """Sum and min over ``capacity`` non-negative leaves, updated and searched in batches.

    Sums are float64 (prefix sums over 1e5+ leaves need the precision); the min is float32: it
    only normalises float32 importance weights, and half the bytes means fewer cache misses.

    Leaves that were never set hold 0 for the sum (never sampled) and +inf for the min (ignored).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        sizes, n = [], self.capacity
        while n > 1:  # each level padded to whole blocks of K
            padded = -(-n // K) * K
            sizes.append(padded)
            n = padded // K
        sizes.append(1)  # the root
        self._starts = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
        self._root = int(self._starts[-1])
        self._sum = np.zeros(self._root + 1)
        self._min = np.full(self._root + 1, np.inf, dtype=np.float32)
        self.compiled = njit is not None

    @property
    def leaves(self) -> np.ndarray:
        """``[capacity]`` view of the leaf values (read-only by convention: use :meth:`set`)."""
        return self._sum[: self.capacity]

    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[self._root])

    def min(self) -> float:
        """Smallest leaf that was set (+inf when none)."""
        return float(self._min[self._root])

    def set(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (repeated indices: the last one wins)."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if len(index) == 0:
            return
        if index.min() < 0 or index.max() >= self.capacity:
            raise IndexError(f"leaf index out of range for a tree of capacity {self.capacity}")
        value = np.asarray(value, dtype=np.float64).reshape(-1)
        if value.shape[0] not in (1, index.shape[0]):
            raise ValueError(f"{value.shape[0]} values for {index.shape[0]} leaves")
        self._set_owned(index, value)

    def clear(self) -> None:
        """Reset every leaf to unset."""
        self._sum[:] = 0.0
        self._min[:] = np.inf

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves."""
        s = self._starts
        for level in range(1, len(s)):
            below = slice(s[level - 1], s[level])
            n = (s[level] - s[level - 1]) // K
            self._sum[s[level] : s[level] + n] = self._sum[below].reshape(-1, K).sum(axis=1)
            self._min[s[level] : s[level] + n] = self._min[below].reshape(-1, K).min(axis=1)

    def _find_owned(self, value: np.ndarray) -> np.ndarray:
        """:meth:`find_prefix_sum` for a fresh, non-negative float64 array the tree may consume
        (the sampler's own draws: no defensive copy)."""
        if self.compiled:
            return _find_nb(self._sum, self._starts, value)
        return _find_py(self._sum, self._starts, value)

    def _find_stratified_owned(self, u: np.ndarray) -> np.ndarray:
        """Leaves for one draw from each of ``len(u)`` equal slices of the total: ``u`` (fresh
        float64 draws in ``[0, 1)``, consumed) becomes ``(u[j] + j) * total / len(u)``."""
        if self.compiled:
            return _find_stratified_nb(self._sum, self._starts, u)
        n = len(u)
        u += np.arange(n)
        u *= self.total() / n
        return _find_py(self._sum, self._starts, u)

    def _set_owned(self, index: np.ndarray, value: np.ndarray) -> None:
        """:meth:`set` for 1-d int64 ``index`` in range and float64 ``value`` of the same
        length (or one value for all)."""
        if not len(index):
            return
        if self.compiled:
            _set_nb(self._sum, self._min, self._starts, index, value)
            return
        if value.shape[0] == 1:
            value = np.broadcast_to(value, index.shape)
        if len(index) > 1 and len(np.unique(index)) < len(index):  # the last one wins
            last = len(index) - 1 - np.unique(index[::-1], return_index=True)[1]
            index, value = index[last], value[last]
        _set_py(self._sum, self._min, self._starts, index, value)

    def find_prefix_sum(self, value: np.ndarray) -> np.ndarray:
        """For each ``value`` in ``[0, total)`` the leaf ``i`` with
        ``sum(leaves[:i]) <= value < sum(leaves[:i + 1])``; never a zero leaf."""
        value = np.array(value, dtype=np.float64, copy=True).reshape(-1)
        np.maximum(value, 0.0, out=value)
        if len(value) == 0:
            return np.zeros(0, dtype=np.int64)
        return self._find_owned(value)
