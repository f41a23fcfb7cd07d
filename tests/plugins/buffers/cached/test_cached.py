"""CachedReplayBuffer: only complete episodes reach the sampled buffer, whole and in order."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
from rlblocks.algo import nstep_return
from rlblocks_buffer_cached import CachedReplayBuffer, CachedWriter


def step(uids, term, trunc=None, dict_obs=False):
    uids = np.asarray(uids, dtype=np.int64)
    n = len(uids)
    obs = {"uid": uids, "pos": np.stack([uids, -uids], 1).astype(np.float32)} if dict_obs else uids
    nxt = uids + 1000
    obs_next = {"uid": nxt, "pos": np.stack([nxt, -nxt], 1).astype(np.float32)} if dict_obs else nxt
    return {"obs": obs, "act": uids % 3, "rew": uids.astype(np.float64),
            "terminated": np.asarray(term),
            "truncated": np.zeros(n, bool) if trunc is None else np.asarray(trunc),
            "obs_next": obs_next}


def run_script(buf, script, dict_obs=False):
    """Add ``script`` ([(env_ids, done flags)]); return the uids of each completed episode in
    the order they ended, and the add() results."""
    uid, open_eps, finished, results = 0, {}, [], []
    for envs, done in script:
        uids = np.arange(uid, uid + len(envs))
        uid += len(envs)
        results.append(buf.add(step(uids, done, dict_obs=dict_obs), env_ids=np.array(envs)))
        for e, u, d in zip(envs, uids.tolist(), done):
            open_eps.setdefault(e, []).append(u)
            if d:
                finished.append(open_eps.pop(e))
    return finished, results


SCRIPT = [([0, 1, 2], [False, False, False]), ([0, 1, 2], [False, True, False]),
          ([2, 0], [True, False]), ([1], [False]), ([0, 1, 2], [True, False, False]),
          ([2], [False]), ([1, 2], [True, True]), ([0, 1], [False, False])]


def uids_of(buf, idx):
    obs = buf.get(idx, "obs", stack_num=1)
    return np.asarray(obs["uid"] if isinstance(obs, rlblocks.Batch) else obs).tolist()


@pytest.mark.parametrize("dict_obs", [False, True])
def test_only_complete_episodes_are_sampled_whole_and_in_order(dict_obs) -> None:
    buf = CachedReplayBuffer(64, num_envs=3, cache_size=8)
    finished, _ = run_script(buf, SCRIPT, dict_obs)
    valid = buf.sample_index(0)
    assert uids_of(buf, valid) == [u for ep in finished for u in ep]
    assert len(buf) == sum(map(len, finished)) and len(buf.unfinished_index()) == 0
    # links stay inside each episode and end at its done step
    k = 0
    for ep in finished:
        slots = valid[k : k + len(ep)]
        k += len(ep)
        assert buf.prev(slots[0]) == slots[0] and buf.next(slots[-1]) == slots[-1]
        assert np.array_equal(buf.next(slots[:-1]), slots[1:])
        assert np.array_equal(buf.prev(slots[1:]), slots[:-1])
        assert buf.done[slots[-1]] and not buf.done[slots[:-1]].any()
    # the open episodes wait in the caches
    cached = sorted(uids_of(buf.cache, buf.cache.unfinished_index()))
    assert cached == [15, 16]
    _, idx = buf.sample(32)
    assert set(idx.tolist()) <= set(valid.tolist())


def test_add_reports_whole_episode_return_and_length() -> None:
    buf = CachedReplayBuffer(64, num_envs=3, cache_size=8)
    _, results = run_script(buf, SCRIPT)
    _, ep_rew, ep_len, _ = results[1]  # env 1 ends its 2-step episode (uids 1, 4)
    assert ep_len.tolist() == [0, 2, 0] and ep_rew.tolist() == [0.0, 5.0, 0.0]


def test_main_buffer_overwrites_the_oldest_complete_episodes() -> None:
    buf = CachedReplayBuffer(5, num_envs=3, cache_size=8)
    finished, _ = run_script(buf, SCRIPT)
    flat = [u for ep in finished for u in ep]
    assert uids_of(buf, buf.sample_index(0)) == flat[-5:]
    first = buf.sample_index(0)[0]
    assert buf.prev(first) == first  # the cut episode starts at its oldest kept step


def test_episode_longer_than_the_cache_keeps_its_newest_steps_and_warns() -> None:
    buf = CachedReplayBuffer(32, num_envs=1, cache_size=4)
    with pytest.warns(UserWarning, match="cache_size"):
        run_script(buf, [([0], [t == 6]) for t in range(7)])
    assert uids_of(buf, buf.sample_index(0)) == [3, 4, 5, 6]


def test_truncate_unfinished_moves_cached_episodes_in_as_truncated() -> None:
    buf = CachedReplayBuffer(64, num_envs=3, cache_size=8)
    run_script(buf, SCRIPT)
    before = len(buf)
    buf.truncate_unfinished()
    assert len(buf) == before + 2 and buf.truncated[buf.sample_index(0)[-1]]
    assert len(buf.cache.unfinished_index()) == 0


def test_truncate_unfinished_of_some_envs_admits_only_their_episodes() -> None:
    buf = CachedReplayBuffer(64, num_envs=3, cache_size=8)
    run_script(buf, SCRIPT)
    held = buf.cache.unfinished_index()
    envs = np.asarray(buf.cache.env_id)[held]
    assert len(envs) == 2, "the script leaves two envs' episodes cached"
    before = len(buf)
    buf.truncate_unfinished(env_ids=envs[:1])
    assert len(buf) > before and buf.truncated[buf.sample_index(0)[-1]]
    left = buf.cache.unfinished_index()
    assert np.asarray(buf.cache.env_id)[left].tolist() == envs[1:].tolist()


def test_nstep_returns_stop_at_the_end_of_a_moved_episode() -> None:
    buf = CachedReplayBuffer(64, num_envs=2, cache_size=8)
    run_script(buf, [([0, 1], [t == 3, t == 2]) for t in range(4)])
    idx = buf.sample_index(0)
    partial, _, _ = nstep_return(buf, idx, gamma=1.0, n_step=3)
    # env 1's episode (uids 1, 3, 5) ended first, then env 0's (0, 2, 4, 6)
    assert uids_of(buf, idx) == [1, 3, 5, 0, 2, 4, 6]
    np.testing.assert_allclose(np.asarray(partial).reshape(-1), [9, 8, 5, 6, 12, 10, 6])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.lists(st.booleans(), min_size=3, max_size=3),
                          st.booleans()), min_size=1, max_size=30))
def test_hdf5_round_trip_keeps_main_buffer_and_caches(tmp_path_factory, steps) -> None:
    buf = CachedReplayBuffer(16, num_envs=3, cache_size=32)
    script = [([0, 1, 2], done) for done, _ in steps]
    run_script(buf, script, dict_obs=True)
    path = os.path.join(tmp_path_factory.mktemp("h5"), "b.h5")
    buf.save_hdf5(path)
    loaded = CachedReplayBuffer.load_hdf5(path)
    assert np.array_equal(loaded.sample_index(0), buf.sample_index(0))
    if len(buf):
        assert np.array_equal(loaded[:].obs.uid, buf[:].obs.uid)
    assert np.array_equal(loaded.cache.unfinished_index(), buf.cache.unfinished_index())
    more = step([999, 1000, 1001], [True, True, True], dict_obs=True)
    a, b = buf.add(more), loaded.add(more)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert np.array_equal(loaded[:].obs.uid, buf[:].obs.uid)


def test_cached_buffer_is_selected_by_name_with_options() -> None:
    buf = rlblocks.make_buffer("cached", size=100, num_envs=2, cache_size=10)
    assert isinstance(buf.writer, CachedWriter) and buf.writer.cache_size == 10
