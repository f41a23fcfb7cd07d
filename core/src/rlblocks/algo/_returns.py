"""Return math shared by all algorithms: GAE, discounted reward-to-go and n-step targets.

Every estimator here follows *partial-episode bootstrapping*: a transition sequence can stop for
three reasons, and only one of them means "the future is worth zero".

=====================  ===========  ==================  =====================
last step of a piece   ``done``     in the buffer's     bootstrap from
                                    unfinished index?   ``V(s_{t+1})``?
=====================  ===========  ==================  =====================
terminated             True         no                  no
truncated (time limit) True         no                  yes
not finished yet       False        yes                 yes
=====================  ===========  ==================  =====================

The flat-array functions (:func:`gae`, :func:`discounted_returns`) take arrays in *trajectory
order*: each contiguous piece of an episode is stored contiguously, and ``segment_end[t]`` marks the
last step of each piece. The buffer-level helpers (:func:`episodic_returns`, :func:`nstep_return`)
build that order from a buffer's episode links (``buffer.next``) and env ids, so they work on any
buffer that keeps several envs' steps interleaved.

Everything is vectorised numpy. The backward recursions ``y_t = x_t + c_t * y_{t+1}`` are solved
with a doubling scan (Hillis-Steele) over affine maps: ``O(T log L)`` work for ``T`` steps and
pieces at most ``L`` long, no Python loop over timesteps and no ``(γλ)^t`` rescaling that could
underflow on long pieces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlblocks.contracts import BufferAbilities

if TYPE_CHECKING:
    from rlblocks.contracts import Buffer

__all__ = [
    "discounted_returns",
    "episodic_returns",
    "gae",
    "nstep_return",
    "reverse_linear_scan",
    "value_mask",
]


def reverse_linear_scan(x: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """Solve ``y[t] = x[t] + coef[t] * y[t+1]`` backwards with ``y[T] = 0``.

    ``x`` has shape ``[T, ...]`` and ``coef`` shape ``[T]`` (broadcast over trailing axes). A
    ``coef[t] == 0`` resets the recursion, which is how episode boundaries are expressed.

    Implemented as a log-depth doubling scan: after the pass with shift ``s`` every ``y[t]`` holds
    the sum over the next ``2s`` steps and ``c[t]`` the product of their coefficients; the loop
    stops as soon as every remaining product is zero (all pieces covered), so its length is
    ``log2(longest piece)``, not ``log2(T)``.
    """
    y = np.array(x, copy=True)
    if y.dtype.kind != "f":
        y = y.astype(np.float64)
    c = np.asarray(coef, dtype=y.dtype).copy()
    n = y.shape[0]
    if c.shape != (n,):
        raise ValueError(f"coef must have shape ({n},), got {c.shape}")
    extra = (1,) * (y.ndim - 1)  # broadcast c over trailing axes of x
    shift = 1
    while shift < n:
        head = c[: n - shift]
        if not head.any():
            break
        y[: n - shift] += head.reshape(-1, *extra) * y[shift:]
        head *= c[shift:]  # numpy makes overlapping in-place ufuncs behave as if buffered
        shift *= 2
    return y


def _flags(a: Any, n: int, name: str) -> np.ndarray:
    out = np.asarray(a, dtype=bool)
    if out.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) like rew, got {out.shape}")
    return out


def _floats(a: Any, n: int, name: str) -> np.ndarray:
    out = np.asarray(a)
    if out.ndim == 0 or out.shape[0] != n:
        raise ValueError(f"{name} must have a leading axis of length {n} like rew, got {out.shape}")
    return out


def _check_discount(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")


def _col(a: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Reshape a ``[T]`` array to broadcast against ``like`` (``[T, ...]``)."""
    return a.reshape(-1, *(1,) * (like.ndim - 1))


def gae(
    rew: Any,
    value: Any,
    value_next: Any,
    terminated: Any,
    segment_end: Any,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> np.ndarray:
    """Generalised advantage estimates with partial-episode bootstrapping.

    All arguments are flat ``[T]`` arrays in trajectory order (``rew`` and the values may carry
    extra trailing axes, e.g. several reward heads)::

        delta[t] = rew[t] + gamma * (1 - terminated[t]) * value_next[t] - value[t]
        adv[t]   = delta[t]                                 if segment_end[t]
                   delta[t] + gamma * lam * adv[t + 1]      otherwise

    ``value_next[t]`` is ``V(s_{t+1})`` (the value of the transition's ``obs_next``); it is used at
    every step, so truncated pieces and pieces that are not finished yet bootstrap from it, while a
    terminated step's future is zero. A terminated step always ends its piece (``segment_end`` is
    or-ed with ``terminated``).

    Returns advantages ``[T, ...]`` in the floating dtype of the inputs (at least float32).
    """
    _check_discount("gamma", gamma)
    _check_discount("lam", lam)
    rew = np.asarray(rew)
    n = rew.shape[0] if rew.ndim else -1
    if n < 0:
        raise ValueError("rew must have a leading time axis, got a scalar")
    value = _floats(value, n, "value")
    value_next = _floats(value_next, n, "value_next")
    term = _flags(terminated, n, "terminated")
    end = _flags(segment_end, n, "segment_end") | term
    dtype = np.result_type(rew.dtype, value.dtype, value_next.dtype, np.float32)
    rew = rew.astype(dtype, copy=False)
    delta = rew + gamma * _col(~term, rew) * value_next - value
    coef = np.where(end, 0.0, gamma * lam)
    return reverse_linear_scan(delta.astype(dtype, copy=False), coef)


def discounted_returns(
    rew: Any,
    value_next: Any,
    terminated: Any,
    segment_end: Any,
    gamma: float = 0.99,
) -> np.ndarray:
    """Discounted reward-to-go with the same bootstrapping rule as :func:`gae`::

        G[t] = rew[t] + gamma * (1 - terminated[t]) * value_next[t]   if segment_end[t]
               rew[t] + gamma * G[t + 1]                              otherwise

    ``value_next`` is only read at piece ends (pass zeros for plain Monte-Carlo returns of
    complete episodes). Shapes as in :func:`gae`.
    """
    _check_discount("gamma", gamma)
    rew = np.asarray(rew)
    n = rew.shape[0] if rew.ndim else -1
    if n < 0:
        raise ValueError("rew must have a leading time axis, got a scalar")
    value_next = _floats(value_next, n, "value_next")
    term = _flags(terminated, n, "terminated")
    end = _flags(segment_end, n, "segment_end") | term
    dtype = np.result_type(rew.dtype, value_next.dtype, np.float32)
    # value_next is read only where a piece ends without termination (elsewhere it may be junk)
    x = (rew + np.where(_col(end & ~term, rew), gamma * value_next, 0.0)).astype(dtype, copy=False)
    coef = np.where(end, 0.0, gamma)
    return reverse_linear_scan(x, coef)


def value_mask(buffer: Buffer, indices: Any) -> np.ndarray:
    """``True`` where the transition at ``indices`` needs bootstrapping from ``V(obs_next)``.

    That is every step except a terminated one (truncated steps and ordinary steps bootstrap).
    """
    indices = np.asarray(indices, dtype=np.int64)
    return ~np.asarray(buffer.get(indices, "terminated"), dtype=bool)  # type: ignore[attr-defined]


def _trajectory_order(buffer: Buffer, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group time-ordered ``indices`` by env so each episode piece is contiguous.

    Returns ``(order, segment_end)``: ``indices[order]`` is in trajectory order and
    ``segment_end[j]`` marks the last step of each contiguous piece in it.
    """
    env = np.asarray(buffer.env_id)[indices]  # type: ignore[attr-defined]
    order = np.argsort(env, kind="stable")
    idx = indices[order]
    nxt = np.asarray(buffer.next(idx))
    end = nxt == idx  # done step, or the newest step of an unfinished episode
    # the episode goes on, but its next step is not the next entry here: a piece ends too
    end[:-1] |= idx[1:] != nxt[:-1]
    if len(end):
        end[-1] = True
    return order, end


def episodic_returns(
    buffer: Buffer,
    indices: Any,
    value: Any,
    value_next: Any,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets for transitions of a buffer.

    ``indices`` are buffer slots in time order, typically ``buffer.sample_index(0)`` (all of it);
    ``value[j]`` / ``value_next[j]`` are ``V(obs)`` / ``V(obs_next)`` of the transition at
    ``indices[j]``. Steps of several envs may interleave: they are grouped per env into
    contiguous episode pieces using the buffer's ``env_id`` and ``next`` links, :func:`gae` runs
    on that order and the results are scattered back to the caller's order.

    A piece ends at a done step, at the newest step of an unfinished episode, or where the next step
    of the episode is not among ``indices``; only terminated steps skip bootstrapping. Any other
    order is taken too (a random sample, as an on-policy policy's ``update(n > 0)`` draws): a
    step whose next step does not follow it among its env's entries ends its piece and
    bootstraps from ``value_next`` - a shorter lambda-return, never one spanning other steps.

    Returns ``(returns, advantages)``, both shaped like ``value``, with
    ``returns = advantages + value`` (the critic's target).
    """
    indices = np.asarray(indices, dtype=np.int64)
    value = np.asarray(value)
    value_next = np.asarray(value_next)
    if value.shape[:1] != indices.shape or value_next.shape != value.shape:
        raise ValueError(
            f"value and value_next must have shape ({len(indices)}, ...) like indices, got "
            f"{value.shape} and {value_next.shape}"
        )
    order, end = _trajectory_order(buffer, indices)
    idx = indices[order]
    rew = np.asarray(buffer.get(idx, "rew"))  # type: ignore[attr-defined]
    term = np.asarray(buffer.get(idx, "terminated"), dtype=bool)  # type: ignore[attr-defined]
    adv_sorted = gae(rew, value[order], value_next[order], term, end, gamma, lam)
    adv = np.empty_like(adv_sorted)
    adv[order] = adv_sorted
    return adv + value, adv


def nstep_return(
    buffer: Buffer,
    indices: Any,
    gamma: float = 0.99,
    n_step: int = 1,
    rebuilds_obs_next: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of the n-step TD target for transitions of a buffer.

    For each slot ``i`` in ``indices`` walk up to ``n_step`` steps along ``buffer.next``, stopping
    early at the end of the episode (a done step) or at the newest step of an unfinished episode.
    With ``m`` the number of steps taken (``1 <= m <= n_step``) and ``j`` the last slot reached::

        partial_return     = sum_{k<m} gamma**k * rew[i_k]                      # [B, ...]
        bootstrap_index    = j                                                  # [B]
        bootstrap_discount = gamma**m * (1 - terminated[j])                     # [B]

    so the target is ``partial_return + bootstrap_discount * V(buffer[bootstrap_index].obs_next)``.
    Truncated and unfinished episodes bootstrap; terminated ones do not.

    A buffer with ``ignore_obs_next`` (frames stored once, as Atari runs do) rebuilds obs_next
    from the next step's obs, so it does not know the obs_next of an episode's last stored step
    when that step did not terminate (a time-limit truncation, or the newest step of a running
    episode). A walk of ``m >= 2`` steps that ends there stops one step earlier instead, an exact
    ``m - 1``-step target whose obs_next is that last step's obs; a single step (``m = 1``) has
    no such fallback and bootstraps from its own obs. ``rebuilds_obs_next`` says whether the
    buffer does so (its :class:`~rlblocks.contracts.BufferAbilities`, which a policy resolves
    once per buffer); None finds it from the buffer.
    """
    if n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {n_step}")
    _check_discount("gamma", gamma)
    indices = np.asarray(indices, dtype=np.int64)
    # The walk as a [n_step, B] chain of slots: row k is k steps along ``next``; a walk that
    # stops stays on its last slot (``next`` of an end is the slot itself), so the last row holds
    # every walk's last slot. The weights of all steps then come from the chain at once instead
    # of a few small array operations per step.
    chain = np.empty((n_step, *indices.shape), dtype=np.int64)
    chain[0] = indices
    for k in range(1, n_step):
        chain[k] = buffer.next(chain[k - 1])
    # alive[k]: the walk took step k (steps 0..m-1 of a walk of m steps); once a walk stops its
    # rows repeat, so a step was taken exactly where the slot changed
    alive = np.ones(chain.shape, dtype=bool)
    np.not_equal(chain[1:], chain[:-1], out=alive[1:])
    steps = alive.sum(axis=0, dtype=np.int64)
    cur = chain[-1]
    # one read of ``rew`` per row: a relabelled view (HER) answers only reads of one slot per
    # sampled row, so the chain cannot be read in one flat call
    rew = np.stack([np.asarray(buffer.get(row, "rew")) for row in chain])  # type: ignore[attr-defined]
    powers = np.array([gamma**k for k in range(n_step)], dtype=np.float64)
    weight = np.where(alive, powers.reshape(-1, *(1,) * indices.ndim), 0.0)
    terms = weight.reshape(*weight.shape, *(1,) * (rew.ndim - weight.ndim)) * rew
    partial = terms[0]
    for k in range(1, n_step):  # in step order, as the return is defined
        partial = partial + terms[k]
    terminated = np.asarray(buffer.get(cur, "terminated"), dtype=bool)  # type: ignore[attr-defined]
    if rebuilds_obs_next is None:
        rebuilds_obs_next = BufferAbilities.of(buffer).rebuilds_obs_next
    if rebuilds_obs_next:
        # the walk ended at a last stored step that did not terminate: its obs_next is unknown
        back = ~terminated & (np.asarray(buffer.next(cur)) == cur) & (steps >= 2)
        if back.any():
            rew = np.asarray(buffer.get(cur, "rew"))  # type: ignore[attr-defined]
            weight = np.where(back, np.power(gamma, (steps - 1).astype(np.float64)), 0.0)
            partial = partial - weight.reshape(-1, *(1,) * (rew.ndim - 1)) * rew
            steps = steps - back
            cur = np.where(back, np.asarray(buffer.prev(cur)), cur)
            terminated = np.where(back, False, terminated)
    dtype = np.result_type(partial.dtype, np.float32)
    discount = np.where(terminated, 0.0, np.power(gamma, steps.astype(np.float64)))
    return partial.astype(dtype, copy=False), cur, discount.astype(dtype, copy=False)
