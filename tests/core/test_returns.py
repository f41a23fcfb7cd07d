"""Return math against brute-force references: per-timestep Python loops over explicit episodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlblocks.algo import (
    discounted_returns,
    episodic_returns,
    gae,
    nstep_return,
    reverse_linear_scan,
    value_mask,
)
from rlblocks.replay import ReplayBuffer

KINDS = ("terminated", "truncated", "unfinished")


# --- brute force ---------------------------------------------------------------------------------


def bf_gae(rew, value, value_next, kind, gamma, lam):
    """One episode piece: ``kind`` says how its last step ended."""
    adv = [0.0] * len(rew)
    nxt = 0.0
    for t in reversed(range(len(rew))):
        last = t == len(rew) - 1
        boot = 0.0 if (last and kind == "terminated") else gamma * value_next[t]
        delta = rew[t] + boot - value[t]
        nxt = delta if last else delta + gamma * lam * nxt
        adv[t] = nxt
    return adv


def bf_discounted(rew, value_next, kind, gamma):
    out = [0.0] * len(rew)
    g = 0.0
    for t in reversed(range(len(rew))):
        if t == len(rew) - 1:
            g = rew[t] + (0.0 if kind == "terminated" else gamma * value_next[t])
        else:
            g = rew[t] + gamma * g
        out[t] = g
    return out


def bf_nstep(rew, kind, p, gamma, n):
    """From step p of an episode: (partial return, last step reached, bootstrap discount)."""
    partial, m = 0.0, 0
    for k in range(n):
        partial += gamma**k * rew[p + k]
        m += 1
        if p + k == len(rew) - 1:
            break
    last = p + m - 1
    ended = last == len(rew) - 1 and kind == "terminated"
    return partial, last, 0.0 if ended else gamma**m


# --- strategies ----------------------------------------------------------------------------------

pieces = st.lists(
    st.tuples(st.integers(1, 9), st.sampled_from(KINDS)), min_size=1, max_size=8
)
discounts = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])


@st.composite
def env_episodes(draw, max_envs=3):
    """Per env a list of episodes ``(length, kind)``; only an env's last one may be unfinished."""
    n_envs = draw(st.integers(1, max_envs))
    envs = []
    for _ in range(n_envs):
        eps = draw(
            st.lists(
                st.tuples(st.integers(1, 7), st.sampled_from(KINDS[:2])), min_size=0, max_size=4
            )
        )
        if draw(st.booleans()) or not eps:
            eps.append((draw(st.integers(1, 7)), "unfinished"))
        envs.append(eps)
    return envs


@st.composite
def interleaved(draw):
    """Episodes of several envs, the order their steps were added in, and a random seed."""
    envs = draw(env_episodes())
    labels = [e for e, eps in enumerate(envs) for length, _ in eps for _ in range(length)]
    order = draw(st.permutations(labels))
    junk = draw(st.integers(0, len(labels)))
    seed = draw(st.integers(0, 2**32 - 1))
    return envs, order, junk, seed


def build(envs, order, junk, seed):
    """Add the steps to a buffer of exactly their number of slots (after ``junk`` one-step
    terminated episodes of env 0 that get overwritten, so valid slots wrap around).

    Returns the buffer and per added step ``t``: env, episode, position, slot, reward, and the
    random values ``V(obs)``, ``V(obs_next)``.
    """
    rng = np.random.default_rng(seed)
    total = len(order)
    buf = ReplayBuffer(total, num_envs=len(envs), seed=seed)
    for _j in range(junk):
        buf.add({"obs": np.array([-1.0]), "act": np.array([0]), "rew": np.array([99.0]),
                 "terminated": np.array([True]), "truncated": np.array([False]),
                 "obs_next": np.array([-1.0])}, env_ids=np.array([0]))
    cursor = [[0, 0] for _ in envs]  # per env: episode, position
    steps = []
    for t, e in enumerate(order):
        ep, p = cursor[e]
        length, kind = envs[e][ep]
        last = p == length - 1
        rew = float(rng.normal())
        index, *_ = buf.add(
            {"obs": np.array([float(t)]), "act": np.array([t]), "rew": np.array([rew]),
             "terminated": np.array([last and kind == "terminated"]),
             "truncated": np.array([last and kind == "truncated"]),
             "obs_next": np.array([t + 0.5])},
            env_ids=np.array([e]),
        )
        steps.append({"env": e, "ep": ep, "p": p, "slot": int(index[0]), "rew": rew})
        cursor[e] = [ep + 1, 0] if last else [ep, p + 1]
    value = rng.normal(size=total)
    value_next = rng.normal(size=total)
    return buf, steps, value, value_next


def episodes_of(envs, steps):
    """``{(env, episode): [t, ...]}`` in step order."""
    out: dict[tuple[int, int], list[int]] = {}
    for t, s in enumerate(steps):
        out.setdefault((s["env"], s["ep"]), []).append(t)
    return out


# --- flat arrays ---------------------------------------------------------------------------------


def flat(pieces_, rng):
    rew, value, value_next, term, end, kinds = [], [], [], [], [], []
    for length, kind in pieces_:
        rew.append(rng.normal(size=length))
        value.append(rng.normal(size=length))
        value_next.append(rng.normal(size=length))
        t = np.zeros(length, bool)
        e = np.zeros(length, bool)
        e[-1] = True
        t[-1] = kind == "terminated"
        term.append(t)
        end.append(e)
        kinds.append(kind)
    return [np.concatenate(x) for x in (rew, value, value_next, term, end)] + [kinds]


@given(pieces, discounts, discounts, st.integers(0, 2**32 - 1))
def test_gae_flat_matches_brute_force(pieces_, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    rew, value, value_next, term, end, _kinds = flat(pieces_, rng)
    got = gae(rew, value, value_next, term, end, gamma, lam)
    want, start = [], 0
    for (length, kind) in pieces_:
        sl = slice(start, start + length)
        want += bf_gae(rew[sl], value[sl], value_next[sl], kind, gamma, lam)
        start += length
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@given(pieces, discounts, st.integers(0, 2**32 - 1))
def test_discounted_returns_flat_matches_brute_force(pieces_, gamma, seed):
    rng = np.random.default_rng(seed)
    rew, _, value_next, term, end, _ = flat(pieces_, rng)
    # junk where value_next is not read must not leak in
    value_next = np.where(end, value_next, np.nan)
    got = discounted_returns(rew, value_next, term, end, gamma)
    want, start = [], 0
    for (length, kind) in pieces_:
        sl = slice(start, start + length)
        want += bf_discounted(rew[sl], value_next[sl], kind, gamma)
        start += length
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_gae_long_piece_is_stable_and_fast_enough():
    """1e5 steps in one piece (no underflow tricks to fail) and in many short ones."""
    rng = np.random.default_rng(0)
    n = 100_000
    rew, v, vn = rng.normal(size=(3, n))
    end = np.zeros(n, bool)
    end[-1] = True
    got = gae(rew, v, vn, np.zeros(n, bool), end, 0.999, 0.99)
    ref = np.empty(n)
    acc = 0.0
    r, vv, vnn = rew.tolist(), v.tolist(), vn.tolist()
    for t in range(n - 1, -1, -1):
        d = r[t] + 0.999 * vnn[t] - vv[t]
        acc = d if t == n - 1 else d + 0.999 * 0.99 * acc
        ref[t] = acc
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    assert np.isfinite(got).all()


def test_gae_dtype_and_terminated_ends_piece():
    rew = np.ones(3, np.float32)
    v = np.zeros(3, np.float32)
    # terminated in the middle without segment_end: still cuts the recursion
    adv = gae(rew, v, v + 10, [False, True, False], [False, False, True], 0.5, 1.0)
    assert adv.dtype == np.float32
    np.testing.assert_allclose(adv, [1 + 5 + 0.5 * 1, 1.0, 1 + 5])


def test_reverse_linear_scan_trailing_axes():
    x = np.arange(8.0).reshape(4, 2)
    c = np.array([0.5, 0.0, 1.0, 0.3])
    y = reverse_linear_scan(x, c)
    want = np.zeros_like(x)
    acc = np.zeros(2)
    for t in range(3, -1, -1):
        acc = x[t] + c[t] * acc
        want[t] = acc
    np.testing.assert_allclose(y, want)


def test_flat_input_validation():
    with pytest.raises(ValueError, match="value_next"):
        gae(np.zeros(3), np.zeros(3), np.zeros(2), np.zeros(3), np.ones(3), 0.9, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns(np.zeros(3), np.zeros(3), np.zeros(3), np.ones(3), 1.5)


# --- buffer level --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(interleaved(), discounts, discounts)
def test_episodic_returns_match_brute_force(case, gamma, lam):
    envs, order, junk, seed = case
    buf, steps, value, value_next = build(envs, order, junk, seed)
    indices = buf.sample_index(0)
    slots = np.array([s["slot"] for s in steps])
    assert np.array_equal(indices, slots)  # time order = add order
    returns, adv = episodic_returns(buf, indices, value, value_next, gamma, lam)
    want = np.zeros(len(steps))
    for (e, ep), ts in episodes_of(envs, steps).items():
        kind = envs[e][ep][1]
        a = bf_gae([steps[t]["rew"] for t in ts], value[ts], value_next[ts], kind, gamma, lam)
        want[ts] = a
    np.testing.assert_allclose(adv, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(returns, want + value, rtol=1e-9, atol=1e-9)

    # results follow the caller's order: any order that keeps each env's steps in time order
    env = buf.env_id[indices]
    for perm in (np.argsort(env, kind="stable"), np.argsort(-env, kind="stable")):
        r2, a2 = episodic_returns(buf, indices[perm], value[perm], value_next[perm], gamma, lam)
        np.testing.assert_allclose(a2, adv[perm], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(r2, returns[perm], rtol=1e-9, atol=1e-9)


@settings(max_examples=150, deadline=None)
@given(interleaved(), discounts, st.integers(1, 5))
def test_nstep_return_matches_brute_force(case, gamma, n_step):
    envs, order, junk, seed = case
    buf, steps, _, _ = build(envs, order, junk, seed)
    eps = episodes_of(envs, steps)
    indices = np.array([s["slot"] for s in steps])
    partial, boot_index, boot_disc = nstep_return(buf, indices, gamma, n_step)
    for t, s in enumerate(steps):
        ts = eps[(s["env"], s["ep"])]
        kind = envs[s["env"]][s["ep"]][1]
        want_r, last, want_d = bf_nstep([steps[u]["rew"] for u in ts], kind, s["p"], gamma, n_step)
        assert partial[t] == pytest.approx(want_r, rel=1e-9, abs=1e-9)
        assert boot_index[t] == steps[ts[last]]["slot"]
        assert boot_disc[t] == pytest.approx(want_d, rel=1e-12, abs=0)
    # the bootstrap observation is the obs_next of the last step reached
    obs_next = buf[boot_index].obs_next
    assert np.array_equal(obs_next, np.array([ts_ + 0.5 for ts_ in buf.obs[boot_index]]))
    # value_mask: every step but a terminated one bootstraps
    assert np.array_equal(value_mask(buf, indices), ~buf.terminated[indices])


def test_episodic_returns_subset_bootstraps_where_indices_stop():
    """A piece whose next step is not among the indices bootstraps from value_next there."""
    buf = ReplayBuffer(10)
    for i in range(4):
        buf.add({"obs": i, "act": 0, "rew": 1.0, "terminated": False, "truncated": False,
                 "obs_next": i + 1})
    idx = np.array([0, 1])  # the episode goes on at slot 2
    v, vn = np.zeros(2), np.array([0.0, 10.0])
    _ret, adv = episodic_returns(buf, idx, v, vn, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [1 + 0.5 * (1 + 5), 1 + 5])


def _one_episode(n: int) -> ReplayBuffer:
    buf = ReplayBuffer(10)
    for i in range(n):
        buf.add({"obs": i, "act": 0, "rew": 1.0, "terminated": False, "truncated": False,
                 "obs_next": i + 1})
    return buf


def test_episodic_returns_out_of_time_order_bootstrap_where_the_order_breaks():
    """A random sample (``update(n > 0)`` of an on-policy policy draws one) is not in time
    order: each step whose next step does not follow it in the list ends its piece and
    bootstraps from ``value_next`` - shorter lambda-returns, never a step of another place."""
    buf = _one_episode(4)
    v, vn = np.zeros(4), np.full(4, 10.0)
    _ret, adv = episodic_returns(buf, np.array([1, 0, 2, 3]), v, vn, gamma=0.5, lam=1.0)
    # slot 1 (first) is followed by 0, not 2: cut, delta = 1 + 0.5 * 10 = 6; slot 0 is followed
    # by 2, not 1: cut too; slots 2, 3 form a piece (3 is the newest: bootstrapped)
    np.testing.assert_allclose(adv, [6, 6, 6 + 0.5 * 6, 6])


def test_episodic_returns_take_pieces_in_any_order_when_each_is_in_time_order():
    """Slots 0-1 and 3 of one episode (slot 2 left out): the two pieces may come in either
    order, as nothing links them."""
    buf = _one_episode(5)
    v, vn = np.zeros(3), np.array([0.0, 10.0, 10.0])
    _ret, adv = episodic_returns(buf, np.array([0, 1, 3]), v, vn, gamma=0.5, lam=1.0)
    _ret, adv2 = episodic_returns(buf, np.array([3, 0, 1]), v[[2, 0, 1]], vn[[2, 0, 1]],
                                  gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [1 + 0.5 * (1 + 5), 1 + 5, 1 + 5])
    np.testing.assert_allclose(adv2, adv[[2, 0, 1]])


def test_nstep_empty_and_validation():
    buf = ReplayBuffer(4)
    buf.add({"obs": 0, "act": 0, "rew": 1.0, "terminated": False, "truncated": False,
             "obs_next": 1})
    r, i, d = nstep_return(buf, np.zeros(0, np.int64), 0.9, 3)
    assert r.shape == i.shape == d.shape == (0,)
    with pytest.raises(ValueError, match="n_step"):
        nstep_return(buf, [0], 0.9, 0)


def test_nstep_without_stored_obs_next_stops_before_an_unknown_next_observation():
    """Frames stored once (ignore_obs_next): a walk that ends at a truncated step or at the
    newest step of a running episode stops one step earlier, where obs_next is known."""

    def fill(buf: ReplayBuffer) -> None:
        # episode A: 3 steps, truncated; episode B: 3 steps so far, still running
        for ep, end in (("A", True), ("B", False)):
            base = 0 if ep == "A" else 10
            for t in range(3):
                buf.add({"obs": base + t, "act": 0, "rew": 1.0 + t, "terminated": False,
                         "truncated": end and t == 2, "obs_next": base + t + 1})

    stored, rebuilt = ReplayBuffer(10), ReplayBuffer(10, ignore_obs_next=True)
    fill(stored)
    fill(rebuilt)
    gamma = 0.5
    idx = np.array([0, 1, 3, 4, 2, 5])
    r, boot, disc = nstep_return(rebuilt, idx, gamma, n_step=3)
    # every walk of >= 2 steps ends at the step before the episode's last: its obs_next is the
    # last step's obs, the true next observation
    assert boot[:4].tolist() == [1, 1, 4, 4]
    np.testing.assert_allclose(r[:4], [1 + 0.5 * 2, 2, 1 + 0.5 * 2, 2])
    np.testing.assert_allclose(disc[:4], [0.25, 0.5, 0.25, 0.5])
    np.testing.assert_array_equal(rebuilt[boot[:4]].obs_next, stored[boot[:4]].obs_next)
    # a single step has no earlier step to stop at: as before
    assert boot[4:].tolist() == [2, 5] and disc[4] == 0.5
    # with obs_next stored, the full walk is kept
    _r, boot_s, disc_s = nstep_return(stored, idx[:4], gamma, n_step=3)
    assert boot_s.tolist() == [2, 2, 5, 5] and disc_s[0] == 0.125


def test_nstep_with_vector_rewards_is_the_scalar_return_of_each_column():
    """Rewards of shape [k] per step (one per agent or objective): each column's n-step return
    is the scalar return of that column's rewards, on the same walk."""
    rng = np.random.default_rng(3)
    vec, cols = ReplayBuffer(32), [ReplayBuffer(32) for _ in range(3)]
    for t in range(20):
        r = rng.normal(size=3)
        # one env's step as a batch of one, so that the reward's own axis is not read as envs
        step = {"obs": [t], "act": [0], "terminated": [t in (6, 13)], "truncated": [t == 17],
                "obs_next": [t + 1]}
        vec.add({**step, "rew": r[None]})
        for c, buf in enumerate(cols):
            buf.add({**step, "rew": r[None, c]})
    idx = np.arange(20)
    partial, boot, disc = nstep_return(vec, idx, 0.9, n_step=4)
    assert partial.shape == (20, 3)
    for c, buf in enumerate(cols):
        p_c, b_c, d_c = nstep_return(buf, idx, 0.9, n_step=4)
        np.testing.assert_allclose(partial[:, c], p_c, rtol=1e-12)
        assert np.array_equal(boot, b_c) and np.array_equal(disc, d_c)
    # a walk that starts 2 steps before a terminal step stops there: rewards t=4, 5, 6 only
    want = vec.rew[4] + 0.9 * vec.rew[5] + 0.81 * vec.rew[6]
    np.testing.assert_allclose(partial[4], want, rtol=1e-12)
    assert boot[4] == 6 and disc[4] == 0.0
