"""VectorReplayBuffer: per-env sub-buffers, time order across them, returns, conformance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
from rlblocks.buffer import ReplayBuffer
from rlblocks.returns import episodic_returns, nstep_return
from rlblocks.testing.buffer_checks import History, check_buffer
from rlblocks_buffer_vector import VectorReplayBuffer


def step(uids, term=None, n=None):
    n = len(uids) if n is None else n
    uids = np.asarray(uids, dtype=np.int64)
    return {
        "obs": uids, "act": uids % 2, "rew": uids.astype(np.float64),
        "terminated": np.zeros(n, bool) if term is None else np.asarray(term),
        "truncated": np.zeros(n, bool), "obs_next": uids + 1000,
    }


def test_vector_buffer_passes_the_buffer_conformance_checks() -> None:
    check_buffer(lambda size, num_envs: VectorReplayBuffer(size, num_envs=num_envs))


def test_each_env_overwrites_only_its_own_sub_buffer() -> None:
    buf = VectorReplayBuffer(6, num_envs=2)  # 3 slots per env
    for t in range(5):  # env 0 steps five times, env 1 once
        buf.add(step([t]), env_ids=[0])
    buf.add(step([100]), env_ids=[1])
    assert len(buf) == 4
    kept = buf.get(buf.sample_index(0), "obs")
    assert kept.tolist() == [2, 3, 4, 100]  # env 0's newest three, env 1 untouched
    assert set(np.flatnonzero(buf.env_id == 0)) == {0, 1, 2}


def test_sample_index_zero_links_all_envs_in_insertion_order_with_unfinished() -> None:
    buf = VectorReplayBuffer(8, num_envs=2)
    buf.add(step([0, 1]))
    buf.add(step([2, 3], term=[True, False]))
    buf.add(step([4], n=1), env_ids=[1])
    idx = buf.sample_index(0)
    assert buf.get(idx, "obs").tolist() == [0, 1, 2, 3, 4]
    assert sorted(buf.get(buf.unfinished_index(), "obs").tolist()) == [4]
    # env 1's episode 1 -> 3 -> 4 is chained inside its sub-buffer
    slot_of = dict(zip(buf.get(idx, "obs").tolist(), idx.tolist()))
    assert buf.next(slot_of[1]) == slot_of[3] and buf.next(slot_of[3]) == slot_of[4]
    assert buf.prev(slot_of[4]) == slot_of[3] and buf.next(slot_of[2]) == slot_of[2]


def test_size_smaller_than_num_envs_is_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match="size >= num_envs"):
        VectorReplayBuffer(3, num_envs=4)


def test_uniform_sampling_reaches_every_valid_slot_and_no_empty_one() -> None:
    buf = VectorReplayBuffer(40, num_envs=4, seed=0)
    for t in range(7):  # envs 0 and 2 only: half-filled sub-buffers
        buf.add(step([2 * t, 2 * t + 1]), env_ids=[0, 2])
    drawn = buf.sample_index(5000)
    assert set(drawn.tolist()) == set(buf.sample_index(0).tolist())


@pytest.mark.parametrize("n_step", [1, 3])
def test_returns_equal_those_of_the_base_buffer(n_step: int) -> None:
    rng = np.random.default_rng(1)
    vec, base = VectorReplayBuffer(64, num_envs=4), ReplayBuffer(64, num_envs=4)
    uid = 0
    for _ in range(12):
        envs = np.sort(rng.choice(4, size=rng.integers(1, 5), replace=False))
        data = step(np.arange(uid, uid + len(envs)), term=rng.random(len(envs)) < 0.2)
        uid += len(envs)
        vec.add(data, env_ids=envs)
        base.add(data, env_ids=envs)
    iv, ib = vec.sample_index(0), base.sample_index(0)
    assert np.array_equal(vec.get(iv, "obs"), base.get(ib, "obs"))
    pv, bv, dv = nstep_return(vec, iv, 0.9, n_step)
    pb, bb, db = nstep_return(base, ib, 0.9, n_step)
    np.testing.assert_allclose(pv, pb)
    np.testing.assert_allclose(dv, db)
    assert np.array_equal(vec.get(bv, "obs"), base.get(bb, "obs"))
    value = np.linspace(0, 1, len(iv))
    rv, av = episodic_returns(vec, iv, value, value + 0.5, 0.9, 0.95)
    rb, ab = episodic_returns(base, ib, value, value + 0.5, 0.9, 0.95)
    np.testing.assert_allclose(av, ab)
    np.testing.assert_allclose(rv, rb)


def test_update_appends_another_buffer_per_env_in_time_order() -> None:
    src = ReplayBuffer(20, num_envs=2)
    src.add(step([0, 1]))
    src.add(step([2], n=1), env_ids=[0])
    src.add(step([3, 4], term=[True, False]))
    dst = VectorReplayBuffer(8, num_envs=2)
    dst.add(step([90], n=1), env_ids=[1])
    dst.update(src)
    idx = dst.sample_index(0)
    assert dst.get(idx, "obs").tolist() == [90, 0, 1, 2, 3, 4]
    slot = dict(zip(dst.get(idx, "obs").tolist(), idx.tolist()))
    assert dst.prev(slot[1]) == slot[90]  # env 1's unfinished episode continues
    assert dst.next(slot[3]) == slot[3]  # terminated


def test_make_buffer_builds_it_by_name_with_replay_options() -> None:
    buf = rlblocks.make_buffer("vector", size=100, num_envs=4, stack_num=2)
    assert isinstance(buf, VectorReplayBuffer) and buf.sub_size == 25 and buf.stack_num == 2


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 2), min_size=1), st.floats(0, 1)),
                min_size=1, max_size=30), st.booleans())
def test_random_add_sequences_match_the_history_and_survive_hdf5(tmp_path_factory, steps,
                                                                 dict_obs) -> None:
    buf = VectorReplayBuffer(9, num_envs=3)
    history = History(3)
    uid = 0
    for envs, p_done in steps:
        envs = np.array(sorted(envs))
        n = len(envs)
        ids = np.arange(uid, uid + n)
        uid += n
        done = (ids * 7919 % 100) / 100 < p_done
        obs = {"uid": ids, "pos": np.stack([ids, -ids], 1).astype(np.float32)} if dict_obs else ids
        data = {"obs": obs, "act": ids % 2, "rew": ids * 1.0, "terminated": done,
                "truncated": np.zeros(n, bool), "obs_next": obs}
        out = buf.add(data, env_ids=envs)
        want = history.record(envs, done, data["rew"], out[0])
        np.testing.assert_allclose(out[1], want[0])
        assert np.array_equal(out[2], want[1]) and np.array_equal(out[3], want[2])

    def uid_of(slots):
        obs = buf.get(slots, "obs")
        return obs["uid"] if dict_obs else obs

    history.verify(buf, uid_of)
    path = tmp_path_factory.mktemp("h5") / "buf.h5"
    buf.save_hdf5(path)
    loaded = VectorReplayBuffer.load_hdf5(path)
    buf = loaded
    history.verify(loaded, uid_of, "after hdf5 load")


_BOOKKEEPING = ("_prev", "_next", "_last", "_stamp", "_ptr", "_count", "_ep_rew", "_ep_len")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(st.sampled_from(["all", "some", "read"]),
                                              st.floats(0, 1), st.integers(0, 2**16)),
                                    min_size=1, max_size=60))
def test_lockstep_adds_leave_exactly_the_bookkeeping_of_step_by_step_adds(sub_size, ops) -> None:
    """The lockstep shortcut writes links, stamps and positions later, in bulk; whatever is
    read in between, and however the adds wrap and overwrite, it must agree with a buffer that
    does all of it at every add."""
    fast = VectorReplayBuffer(3 * sub_size, num_envs=3)
    slow = VectorReplayBuffer(3 * sub_size, num_envs=3)
    slow._pending_cap = 0  # never takes the shortcut
    uid = 0
    for kind, p_done, salt in ops:
        if kind == "read":
            assert np.array_equal(fast.sample_index(0), slow.sample_index(0))
            for name in _BOOKKEEPING:
                assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
            continue
        envs = np.arange(3) if kind == "all" else np.flatnonzero([salt & 1, salt & 2, 1])
        n = len(envs)
        ids = np.arange(uid, uid + n)
        uid += n
        done = ((ids * 7919 + salt) % 100) / 100 < p_done / 4
        data = {"obs": ids, "act": ids % 2, "rew": ids * 1.0, "terminated": done,
                "truncated": np.zeros(n, bool), "obs_next": ids + 1}
        got = fast.add(dict(data), env_ids=envs)
        want = slow.add(dict(data), env_ids=envs)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    for name in _BOOKKEEPING:
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    running = fast._ep_len > 0
    assert np.array_equal(fast._ep_start[running], slow._ep_start[running])
    idx = fast.sample_index(0)
    assert np.array_equal(idx, slow.sample_index(0))
    assert np.array_equal(fast.prev(idx), slow.prev(idx))
    assert np.array_equal(fast.next(idx), slow.next(idx))
    assert np.array_equal(fast.unfinished_index(), slow.unfinished_index())


def test_lockstep_adds_take_the_shortcut_and_catch_up_on_read() -> None:
    buf = VectorReplayBuffer(12, num_envs=3)
    for t in range(3):
        buf.add(step([3 * t, 3 * t + 1, 3 * t + 2]), env_ids=np.arange(3))
    assert buf._pending == 2  # the first add allocated the storage; the next two wrote data only
    assert buf.next(np.array([0])).tolist() == [1]  # a read catches up
    assert buf._pending == 0
    assert buf.prev(np.array([2, 6])).tolist() == [1, 5]
    assert buf.unfinished_index().tolist() == [2, 6, 10]


def test_int32_insertion_stamps_are_renumbered_without_changing_the_order() -> None:
    """Stamps are int32: before the counter could overflow, the valid slots are renumbered in
    their order. A tiny limit forces many renumberings; time order must match a buffer that
    never renumbers."""

    class Tight(VectorReplayBuffer):
        _STAMP_LIMIT = 40  # renumber whenever the clock passes 40 - 2 * maxsize

    tight, plain = Tight(9, num_envs=3), VectorReplayBuffer(9, num_envs=3)
    assert tight._stamp.dtype == np.int32
    rng = np.random.default_rng(0)
    uid = 0
    for t in range(60):
        envs = np.arange(3) if t % 3 else np.sort(rng.choice(3, size=2, replace=False))
        ids = np.arange(uid, uid + len(envs))
        uid += len(envs)
        data = step(ids, term=rng.random(len(envs)) < 0.2)
        tight.add(dict(data), env_ids=envs)
        plain.add(dict(data), env_ids=envs)
        assert np.array_equal(tight.sample_index(0), plain.sample_index(0)), t
        assert tight._clock < 40
    assert np.array_equal(tight.obs[tight.sample_index(0)], plain.obs[plain.sample_index(0)])
