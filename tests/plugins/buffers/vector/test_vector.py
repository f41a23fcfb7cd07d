"""VectorReplayBuffer: per-env sub-buffers with derived links, env-by-env order, returns,
conformance, memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
from rlblocks.algo import episodic_returns, nstep_return
from rlblocks.replay import ReplayBuffer
from rlblocks.testing.buffer_checks import History, check_buffer
from rlblocks_buffer_vector import PerEnvLayout, VectorReplayBuffer


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


def test_sample_index_zero_links_every_env_trajectory_in_time_order_with_unfinished() -> None:
    buf = VectorReplayBuffer(8, num_envs=2)
    buf.add(step([0, 1]))
    buf.add(step([2, 3], term=[True, False]))
    buf.add(step([4], n=1), env_ids=[1])
    idx = buf.sample_index(0)
    assert buf.get(idx, "obs").tolist() == [0, 2, 1, 3, 4]  # env 0's steps, then env 1's
    assert buf[:].obs.tolist() == [0, 2, 1, 3, 4]
    assert sorted(buf.get(buf.unfinished_index(), "obs").tolist()) == [4]
    # env 1's episode 1 -> 3 -> 4 is chained inside its sub-buffer
    slot_of = dict(zip(buf.get(idx, "obs").tolist(), idx.tolist()))
    assert buf.next(slot_of[1]) == slot_of[3] and buf.next(slot_of[3]) == slot_of[4]
    assert buf.prev(slot_of[4]) == slot_of[3] and buf.next(slot_of[2]) == slot_of[2]
    assert buf.prev(slot_of[2]) == slot_of[0] and buf.next(slot_of[0]) == slot_of[2]


def test_full_sub_buffers_list_oldest_first_and_cut_the_overwritten_episode_start() -> None:
    buf = VectorReplayBuffer(6, num_envs=2)  # 3 slots per env
    for t in range(5):
        buf.add(step([2 * t, 2 * t + 1]))
    assert buf[:].obs.tolist() == [4, 6, 8, 5, 7, 9]
    oldest = buf.sample_index(0)[[0, 3]]
    assert buf.prev(oldest).tolist() == oldest.tolist()  # their episode lost its beginning
    assert buf.next(buf.unfinished_index()).tolist() == buf.unfinished_index().tolist()
    assert buf.prev(np.array([-1, -2])).tolist() == [5, 3]  # negative slots count from the end
    with pytest.raises(IndexError, match="out of range"):
        buf.next(6)


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
    uids = vec.get(iv, "obs")
    assert sorted(uids.tolist()) == base.get(ib, "obs").tolist()
    ib = ib[np.argsort(base.get(ib, "obs"))][uids]  # the same transitions, in the vector's order
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
    assert dst.get(idx, "obs").tolist() == [0, 2, 3, 90, 1, 4]
    slot = dict(zip(dst.get(idx, "obs").tolist(), idx.tolist()))
    assert dst.prev(slot[1]) == slot[90]  # env 1's unfinished episode continues
    assert dst.next(slot[3]) == slot[3]  # terminated


def test_make_buffer_builds_it_by_name_with_replay_options() -> None:
    buf = rlblocks.make_buffer("vector", size=100, num_envs=4, stack_num=2)
    assert isinstance(buf.layout, PerEnvLayout) and buf.layout.sub_size == 25
    assert buf.stack_num == 2 and buf.parts()["layout"] == ("vector", {})


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


class _PerEnvReference:
    """The vector buffer's meaning, spelled out: one base buffer of ``sub_size`` slots per env,
    sub-buffer ``e`` at slots ``e * sub_size ...``."""

    def __init__(self, sub_size: int, num_envs: int) -> None:
        self.sub, self.bufs = sub_size, [ReplayBuffer(sub_size) for _ in range(num_envs)]

    def add(self, data: dict, envs: np.ndarray) -> tuple:
        out = []
        for row, e in enumerate(envs.tolist()):
            one = {k: v[row] for k, v in data.items()}
            pos, ep_rew, ep_len, start = self.bufs[e].add(one)
            out.append((pos + e * self.sub, ep_rew, ep_len, start + e * self.sub))
        return tuple(np.concatenate(col) for col in zip(*out))

    def order(self) -> np.ndarray:
        return np.concatenate([b.sample_index(0) + e * self.sub for e, b in enumerate(self.bufs)])

    def links(self, which: str) -> np.ndarray:
        return np.concatenate([getattr(b, which)(np.arange(self.sub)) + e * self.sub
                               for e, b in enumerate(self.bufs)])

    def unfinished(self) -> np.ndarray:
        return np.concatenate(
            [b.unfinished_index() + e * self.sub for e, b in enumerate(self.bufs)])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(
    st.tuples(st.sampled_from(["all", "all", "some", "reset", "truncate", "update", "hdf5"]),
              st.floats(0, 1), st.integers(0, 2**16)), min_size=1, max_size=60))
def test_derived_links_match_one_base_buffer_per_env(tmp_path_factory, sub_size, ops) -> None:
    """Whatever the mix of lockstep steps, partial steps, wrap-around, overwrites, resets that
    keep episode statistics, truncation, bulk updates and hdf5 round trips: prev and next of
    every slot, sample_index(0), unfinished_index, add results and episode statistics equal
    those of separate base buffers, one per env."""
    n = 3
    buf, ref = VectorReplayBuffer(n * sub_size, num_envs=n), _PerEnvReference(sub_size, n)
    uid = 0
    for kind, p_done, salt in ops:
        if kind == "reset":
            keep = bool(salt & 1)
            buf.reset(keep_statistics=keep)
            for b in ref.bufs:
                b.reset(keep_statistics=keep)
        elif kind == "truncate":  # every env's episodes, or (salt & 8) those of some envs
            some = np.flatnonzero([salt & 1, salt & 2, salt & 4]) if salt & 8 else np.arange(n)
            got = buf.truncate_unfinished(some if salt & 8 else None)
            want = [b.unfinished_index() + e * ref.sub for e, b in enumerate(ref.bufs)
                    if e in some]  # fmt: skip
            want_all = np.concatenate([np.zeros(0, np.int64), *want])
            assert sorted(got.tolist()) == sorted(want_all.tolist())
            for e in some:
                ref.bufs[e].truncate_unfinished()
        elif kind == "hdf5":
            path = tmp_path_factory.mktemp("h5") / "buf.h5"
            buf.save_hdf5(path)
            buf = VectorReplayBuffer.load_hdf5(path)
        else:
            envs = np.arange(n) if kind == "all" else np.flatnonzero([salt & 1, salt & 2, 1])
            k = len(envs) * (1 + (salt >> 4) % 3 if kind == "update" else 1)
            ids = np.arange(uid, uid + k)
            uid += k
            done = ((ids * 7919 + salt) % 100) / 100 < p_done / 3
            data = {"obs": ids, "act": ids % 2, "rew": ids * 1.0, "terminated": done,
                    "truncated": np.zeros(k, bool), "obs_next": ids + 1}
            if kind == "update":  # k steps of envs, added elsewhere, appended in bulk
                src = ReplayBuffer(k, num_envs=n)
                rows = np.tile(envs, k // len(envs))
                for j in range(0, k, len(envs)):
                    src.add({key: v[j : j + len(envs)] for key, v in data.items()},
                            env_ids=envs)
                buf.update(src)
                ref.add(data, rows)
            else:
                got = buf.add(dict(data), env_ids=envs)
                want = ref.add(data, envs)
                for a, b in zip(got[:3], want[:3]):
                    np.testing.assert_array_equal(a, b)
        every = np.arange(buf.maxsize)
        assert np.array_equal(buf.sample_index(0), ref.order()), kind
        assert np.array_equal(buf.prev(every), ref.links("prev")), kind
        assert np.array_equal(buf.next(every), ref.links("next")), kind
        assert np.array_equal(buf.unfinished_index(), ref.unfinished()), kind
        assert len(buf) == sum(len(b) for b in ref.bufs)
        assert np.array_equal(buf.layout.stats.len, [b.layout.stats.len[0] for b in ref.bufs])
        np.testing.assert_allclose(buf.layout.stats.rew, [b.layout.stats.rew[0] for b in ref.bufs])
        if len(buf):
            assert np.array_equal(buf[:].obs, np.concatenate(
                [b[:].obs for b in ref.bufs if len(b)]))
            # later steps of the same episode: chunked scan vs walking next()
            valid = buf.sample_index(0)
            walked, cur = np.zeros(len(valid), np.int64), valid
            for _ in range(buf.sub_size):
                step_ = ref.links("next")[cur]
                walked += step_ != cur
                cur = step_
            assert np.array_equal(buf.layout.steps_after(valid, chunk=2), walked)
            assert set(buf.sample_index(64).tolist()) <= set(valid.tolist())  # never empty slots
            assert np.array_equal(buf.advance(valid, walked), cur)


def test_memory_is_the_stored_data_alone() -> None:
    """No per-slot bookkeeping: 1e4 HalfCheetah-sized transitions take what their fields take
    (obs and obs_next 17 float32, act 6 float32, rew float64, two flags = 170 bytes)."""
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buf = VectorReplayBuffer(10_000, num_envs=8)
    rng = np.random.default_rng(0)
    step_ = {"obs": rng.standard_normal((8, 17), dtype=np.float32),
             "act": rng.standard_normal((8, 6), dtype=np.float32), "rew": np.zeros(8),
             "terminated": np.zeros(8, bool), "truncated": np.zeros(8, bool)}
    step_["obs_next"] = step_["obs"]
    buf.add(step_)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used < 10_000 * 170 + 20_000, used


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(
    st.sampled_from(["all", "all", "all", "some", "done", "reset", "read"]), st.integers(0, 7)),
    min_size=1, max_size=80))
def test_running_statistics_left_behind_by_lockstep_adds_catch_up_exactly(sub_size, ops) -> None:
    """Lockstep adds that end no episode add their rewards to the running returns later, in
    bulk; whatever happens in between (more adds past a full sub-buffer, an episode end, a
    partial step, a reset that keeps statistics), the statistics must equal step-by-step ones."""
    fast, slow = VectorReplayBuffer(3 * sub_size, 3), VectorReplayBuffer(3 * sub_size, 3)
    slow.layout._stat_cap = 0  # never leaves anything behind
    rng = np.random.default_rng(sub_size)
    for kind, salt in ops:
        if kind == "read":
            assert np.array_equal(fast.layout.stats.len, slow.layout.stats.len)
            np.testing.assert_allclose(fast.layout.stats.rew, slow.layout.stats.rew)
            continue
        if kind == "reset":
            fast.reset(keep_statistics=True)
            slow.reset(keep_statistics=True)
            continue
        envs = np.arange(3) if kind != "some" else np.flatnonzero([salt & 1, salt & 2, 1])
        n = len(envs)
        term = np.zeros(n, bool)
        if kind == "done":
            term[salt % n] = True
        data = {"obs": np.zeros(n), "act": np.zeros(n), "rew": rng.standard_normal(n),
                "terminated": term, "truncated": np.zeros(n, bool), "obs_next": np.zeros(n)}
        got = fast.add(dict(data), env_ids=envs if kind == "some" else None)
        want = slow.add(dict(data), env_ids=envs if kind == "some" else None)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b)
    assert np.array_equal(fast.layout.stats.len, slow.layout.stats.len)
    np.testing.assert_allclose(fast.layout.stats.rew, slow.layout.stats.rew)
    fs, ss = fast.layout.stats, slow.layout.stats
    assert np.array_equal(fs.start[fs.len > 0], ss.start[ss.len > 0])
