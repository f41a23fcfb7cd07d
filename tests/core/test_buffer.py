"""ReplayBuffer: the seed's examples, invariants over random add sequences, files, errors."""

from __future__ import annotations

import copy
import os
import pickle

import h5py
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks.testing.buffer_checks import History, _add_script, _script_obs_next, check_buffer

# --- the seed's examples (gymnasium names: done= is accepted and means terminated) -------------


def test_seed_example_add_update_links_pickle_hdf5(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    buf = ReplayBuffer(size=20)
    for i in range(3):
        buf.add(Batch(obs=i, act=i, rew=i, done=0, obs_next=i + 1, info={}))
    assert repr(buf.obs) == repr(
        np.array([0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    )
    assert len(buf.obs) == 20
    assert len(buf) == 3
    with open("buf.pkl", "wb") as f:
        pickle.dump(buf, f)
    buf.save_hdf5("buf.hdf5")

    buf2 = ReplayBuffer(size=10)
    for i in range(15):
        done = i % 4 == 0
        buf2.add(Batch(obs=i, act=i, rew=i, done=done, obs_next=i + 1, info={}))
    assert len(buf2) == 10
    assert buf2.obs.tolist() == [10, 11, 12, 13, 14, 5, 6, 7, 8, 9]

    written = buf.update(buf2)
    assert written.tolist() == list(range(3, 13))
    assert buf.obs.tolist() == [0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14] + [0] * 7

    indice = buf.sample_index(0)
    assert indice.tolist() == list(range(13))
    assert buf.prev(indice).tolist() == [0, 0, 1, 2, 3, 4, 5, 7, 7, 8, 9, 11, 11]
    assert buf.next(indice).tolist() == [1, 2, 3, 4, 5, 6, 6, 8, 9, 10, 10, 12, 12]

    batch_data, indice = buf.sample(batch_size=4)
    assert (batch_data.obs == buf[indice].obs).tolist() == [True] * 4
    assert len(buf) == 13

    with open("buf.pkl", "rb") as f:
        buf = pickle.load(f)
    assert len(buf) == 3
    buf = ReplayBuffer.load_hdf5("buf.hdf5")
    assert len(buf) == 3
    assert buf.obs.tolist() == [0, 1, 2] + [0] * 17


STACK_REPR = """\
ReplayBuffer(
    obs: Batch(
             id: array([ 9, 10, 11, 12, 13, 14, 15,  7,  8]),
         ),
    act: array([ 9, 10, 11, 12, 13, 14, 15,  7,  8]),
    rew: array([ 9., 10., 11., 12., 13., 14., 15.,  7.,  8.]),
    terminated: array([False,  True, False, False, False, False,  True, False, False]),
    truncated: array([False, False, False, False, False, False, False, False, False]),
    done: array([False,  True, False, False, False, False,  True, False, False]),
)"""

STACK_OBS = """\
[[ 7  7  8  9]
 [ 7  8  9 10]
 [11 11 11 11]
 [11 11 11 12]
 [11 11 12 13]
 [11 12 13 14]
 [12 13 14 15]
 [ 7  7  7  7]
 [ 7  7  7  8]]"""

STACK_OBS_NEXT = """\
[[ 7  7  7  8]
 [ 7  7  8  9]
 [ 7  8  9 10]
 [ 7  8  9 10]
 [11 11 11 12]
 [11 11 12 13]
 [11 12 13 14]
 [12 13 14 15]
 [12 13 14 15]]"""


def test_seed_example_stack_num_and_ignore_obs_next(capsys):
    buf = ReplayBuffer(size=9, stack_num=4, ignore_obs_next=True)
    for i in range(16):
        done = i % 5 == 0
        _ptr, ep_rew, ep_len, _ep_idx = buf.add(
            Batch(obs={"id": i}, act=i, rew=i, done=done, obs_next={"id": i + 1})
        )
        print(i, ep_len, ep_rew)
    lines = capsys.readouterr().out.splitlines()
    want = {0: "[1] [0.]", 5: "[5] [15.]", 10: "[5] [40.]", 15: "[5] [65.]"}
    assert lines == [f"{i} {want.get(i, '[0] [0.]')}" for i in range(16)]

    assert str(buf) == STACK_REPR  # obs_next is not stored
    index = np.arange(len(buf))
    assert str(buf.get(index, "obs").id) == STACK_OBS
    assert abs(buf.get(index, "obs")["id"] - buf[index].obs.id).sum().sum() == 0
    # buf[:] reads in time order: index [7, 8, 0, 1, ..., 6]
    assert str(buf[:].obs_next.id) == STACK_OBS_NEXT
    full_index = np.array([7, 8, 0, 1, 2, 3, 4, 5, 6])
    assert np.allclose(buf[:].obs_next.id, buf[full_index].obs_next.id)
    assert "obs_next" not in buf
    assert buf.get(index, "obs_next").id.shape == (9, 4)  # get() rebuilds it too
    assert buf.get(index, "act").shape == (9,)  # only obs/obs_next/info/policy stack
    assert buf.get(index, "obs", stack_num=1).id.tolist() == buf.obs.id.tolist()


# --- random add sequences ------------------------------------------------------------------------

flag = st.sampled_from([False, False, False, True])


@st.composite
def add_calls(draw, num_envs, min_size=1, max_size=25):
    """A list of add() calls: (distinct env ids, terminated, truncated)."""
    calls = []
    for _ in range(draw(st.integers(min_size, max_size))):
        envs = draw(st.lists(st.integers(0, num_envs - 1), min_size=1, max_size=num_envs,
                             unique=True))
        term = [draw(flag) for _ in envs]
        trunc = [draw(flag) for _ in envs]
        calls.append((envs, term, trunc))
    return calls


@st.composite
def scenario(draw):
    num_envs = draw(st.integers(1, 4))
    size = draw(st.integers(num_envs, 12))
    return num_envs, size, draw(add_calls(num_envs)), draw(st.booleans())


def uid_reader(buf, dict_obs):
    def read(slots):
        obs = buf.get(slots, "obs", stack_num=1)
        return np.asarray(obs["uid"] if dict_obs else obs)

    return read


def fill(buf, calls, dict_obs, check_each=True):
    history = History(buf.num_envs, time_ordered=True)
    reader = uid_reader(buf, dict_obs)

    def check(where):
        if check_each:
            history.verify(buf, reader, where)

    _add_script(buf, history, calls, dict_obs, check, obs_next_ids=_script_obs_next(calls))
    history.verify(buf, reader, "end")
    return history


@settings(max_examples=120, deadline=None)
@given(scenario(), st.integers(1, 3))
def test_random_adds_match_history(case, stack_num):
    """len, add() results, prev/next within one env's episode and never across a done,
    sample_index(0) time order and unfinished_index, after every add."""
    num_envs, size, calls, dict_obs = case
    buf = ReplayBuffer(size, num_envs=num_envs, stack_num=stack_num)
    fill(buf, calls, dict_obs)
    valid = buf.sample_index(0)
    assert len(buf) == min(size, sum(len(c[0]) for c in calls))
    # links stay inside one env's episode
    prev, nxt = buf.prev(valid), buf.next(valid)
    assert np.array_equal(buf.env_id[prev], buf.env_id[valid])
    assert np.array_equal(buf.env_id[nxt], buf.env_id[valid])
    assert not buf.done[prev[prev != valid]].any(), "prev crossed a done"
    # a step without a successor is done or the newest of its env's unfinished episode
    ends = valid[nxt == valid]
    assert set(ends[~buf.done[ends]].tolist()) <= set(buf.unfinished_index().tolist())
    # frame stacking follows prev
    frames = buf.get(valid, "obs", stack_num=stack_num)
    frames = np.asarray(frames["uid"] if dict_obs else frames).reshape(len(valid), stack_num)
    cur = valid
    for k in range(stack_num - 1, -1, -1):
        want = buf.get(cur, "obs", stack_num=1)
        want = np.asarray(want["uid"] if dict_obs else want)
        assert np.array_equal(frames[:, k], want)
        cur = buf.prev(cur)


@settings(max_examples=120, deadline=None)
@given(scenario())
def test_obs_next_rebuild_equals_stored(case):
    num_envs, size, calls, dict_obs = case
    stored = ReplayBuffer(size, num_envs=num_envs)
    rebuilt = ReplayBuffer(size, num_envs=num_envs, ignore_obs_next=True)
    fill(stored, calls, dict_obs, check_each=False)
    fill(rebuilt, calls, dict_obs, check_each=False)
    valid = stored.sample_index(0)
    known = stored.next(valid) != valid  # rebuilt obs_next is known when the episode goes on
    a, b = stored[:].obs_next, rebuilt[:].obs_next
    if dict_obs:
        for key in ("uid", "pos"):
            assert np.array_equal(a[key][known], b[key][known])
    else:
        assert np.array_equal(a[known], b[known])
    assert "obs_next" not in rebuilt and "obs_next" in stored


def _row(buf, i):
    """One valid transition of ``buf`` as a single-step batch for add()."""
    out = buf[int(i)]
    out.pop("done")
    return out


def _assert_same_state(a, b):
    assert len(a) == len(b)
    valid = a.sample_index(0)
    assert np.array_equal(valid, b.sample_index(0))
    assert np.array_equal(a.prev(valid), b.prev(valid))
    assert np.array_equal(a.next(valid), b.next(valid))
    assert np.array_equal(a.env_id[valid], b.env_id[valid])
    assert np.array_equal(a.unfinished_index(), b.unfinished_index())
    assert a.layout.state() == b.layout.state()
    for (pa, xa, _), (pb, xb, _) in zip(a._leaves, b._leaves, strict=True):
        assert pa == pb
        assert np.array_equal(xa[valid], xb[valid]), pa
    sa, sb = a.layout.stats, b.layout.stats
    assert np.allclose(sa.rew, sb.rew) and np.array_equal(sa.len, sb.len)
    running = sa.len > 0
    assert np.array_equal(sa.start[running], sb.start[running])


@settings(max_examples=150, deadline=None)
@given(scenario(), st.data())
def test_update_equals_adding_one_by_one(case, data):
    num_envs, size, calls, dict_obs = case
    other_envs = data.draw(st.integers(1, num_envs))
    other_size = data.draw(st.integers(other_envs, 16))
    other_calls = data.draw(add_calls(other_envs, min_size=0))
    ignore_self, ignore_other = data.draw(st.booleans()), data.draw(st.booleans())
    start_empty = data.draw(st.booleans())

    buf = ReplayBuffer(size, num_envs=num_envs, ignore_obs_next=ignore_self)
    if not start_empty:
        fill(buf, calls, dict_obs, check_each=False)
    other = ReplayBuffer(other_size, num_envs=other_envs, ignore_obs_next=ignore_other)
    if other_calls:
        fill(other, other_calls, dict_obs, check_each=False)

    expected = copy.deepcopy(buf)
    slots = []
    for i in other.sample_index(0):
        index, *_ = expected.add(_row(other, i), env_ids=[int(other.env_id[i])])
        slots.append(int(index[0]))

    got = buf.update(other)
    assert got.tolist() == slots[len(slots) - len(got):]
    assert len(got) == min(len(slots), size)
    if len(other) == 0 and start_empty:
        assert len(buf) == 0
        return
    _assert_same_state(buf, expected)


def test_update_continues_running_episode_stats():
    a, b = ReplayBuffer(10), ReplayBuffer(10)
    for i in range(3):
        a.add({"obs": i, "act": 0, "rew": 1.0, "done": False, "obs_next": i + 1})
    for i in range(3, 5):
        b.add({"obs": i, "act": 0, "rew": 1.0, "done": False, "obs_next": i + 1})
    a.update(b)
    _, ep_rew, ep_len, ep_start = a.add({"obs": 5, "act": 0, "rew": 1.0, "done": True,
                                         "obs_next": 6})
    assert ep_rew.tolist() == [6.0] and ep_len.tolist() == [6] and ep_start.tolist() == [0]
    assert a.prev(np.arange(6)).tolist() == [0, 0, 1, 2, 3, 4]


def test_update_rejects_foreign_env_ids_and_keys():
    a = ReplayBuffer(5, num_envs=1)
    b = ReplayBuffer(5, num_envs=2)
    b.add({"obs": np.zeros(2), "act": np.zeros(2), "rew": np.zeros(2), "terminated": [0, 0],
           "truncated": [0, 0], "obs_next": np.zeros(2)})
    with pytest.raises(ValueError, match="num_envs=1"):
        a.update(b)
    c = ReplayBuffer(5, num_envs=2)
    c.add({"obs": np.zeros(2), "act": np.zeros(2), "rew": np.zeros(2), "done": [0, 0],
           "obs_next": np.zeros(2), "extra": np.ones(2)})
    with pytest.raises(ValueError, match="extra"):
        c.update(b)
    with pytest.raises(ValueError, match="itself"):
        c.update(c)


# --- add() details -------------------------------------------------------------------------------


def test_add_many_envs_returns_and_subsets():
    buf = ReplayBuffer(6, num_envs=3)
    step = {"obs": np.arange(3), "act": np.arange(3), "rew": np.array([1.0, 2.0, 3.0]),
            "terminated": np.array([False, True, False]), "truncated": np.zeros(3, bool),
            "obs_next": np.arange(3) + 1}
    index, ep_rew, ep_len, ep_start = buf.add(step)
    assert index.dtype == np.int64 and index.tolist() == [0, 1, 2]
    assert ep_rew.tolist() == [0.0, 2.0, 0.0] and ep_len.tolist() == [0, 1, 0]
    assert ep_start.tolist() == [0, 1, 2]
    sub = {k: v[[2, 0]] for k, v in step.items()}
    sub["truncated"] = np.array([True, False])
    index, ep_rew, ep_len, ep_start = buf.add(sub, env_ids=[2, 0])
    assert index.tolist() == [3, 4]
    assert ep_rew.tolist() == [6.0, 0.0] and ep_len.tolist() == [2, 0]
    assert ep_start.tolist() == [2, 0]
    assert buf.prev(np.array([3, 4])).tolist() == [2, 0]
    assert buf.next(np.array([0, 2])).tolist() == [4, 3]
    assert buf.unfinished_index().tolist() == [4]  # env 1 ended, env 2 truncated
    assert buf.env_id[:5].tolist() == [0, 1, 2, 2, 0]
    assert buf.done[:5].tolist() == [False, True, False, True, False]
    # wrap around: 3 rows at slot 5 go to 5, 0, 1
    index, *_ = buf.add(step)
    assert index.tolist() == [5, 0, 1]
    assert len(buf) == 6


def test_add_accepts_batch_dict_tensors_and_extra_keys():
    buf = ReplayBuffer(4, num_envs=2)
    buf.add(Batch(obs=torch.zeros(2, 3), act=torch.tensor([1, 2]), rew=torch.tensor([0.5, 1.0]),
                  terminated=torch.tensor([False, False]), truncated=torch.tensor([False, True]),
                  obs_next=torch.ones(2, 3), policy={"logp": torch.tensor([-1.0, -2.0])},
                  weight=np.array([3, 4])))
    assert buf.obs.shape == (4, 3) and buf.obs.dtype == np.float32
    assert buf.rew.dtype == np.float32  # floating rewards keep their dtype
    assert buf.policy.logp[:2].tolist() == [-1.0, -2.0]
    assert buf.weight[:2].tolist() == [3, 4]
    assert buf.keys() == ["obs", "act", "rew", "terminated", "truncated", "obs_next", "policy",
                          "weight"]
    out = buf[np.array([0, 1])]
    assert list(out.keys()) == ["obs", "act", "rew", "terminated", "truncated", "done",
                                "obs_next", "policy", "weight"]
    ints = ReplayBuffer(2)
    ints.add({"obs": 1, "act": 1, "rew": 1, "done": True, "obs_next": 1})
    assert ints.rew.dtype == np.float64 and ints.terminated.dtype == np.bool_


def test_add_errors_name_the_key():
    buf = ReplayBuffer(4, num_envs=2)
    good = {"obs": np.zeros((2, 3)), "act": np.zeros(2), "rew": np.zeros(2),
            "terminated": np.zeros(2, bool), "truncated": np.zeros(2, bool),
            "obs_next": np.zeros((2, 3))}
    buf.add(good)
    with pytest.raises(ValueError, match=r"'obs_next'.*shape"):
        buf.add({**good, "obs_next": np.zeros((2, 4))})
    with pytest.raises(ValueError, match=r"missing key\(s\) \['act'\]"):
        buf.add({k: v for k, v in good.items() if k != "act"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['extra'\]"):
        buf.add({**good, "extra": np.zeros(2)})
    with pytest.raises(ValueError, match="'obs'"):
        buf.add({**good, "obs": np.zeros(3)})  # no env axis
    with pytest.raises(ValueError, match="env_ids"):
        buf.add(good, env_ids=[1, 1])
    with pytest.raises(ValueError, match="env_ids"):
        buf.add(good, env_ids=[0, 2])
    with pytest.raises(ValueError, match="env_ids"):
        buf.add(good, env_ids=[-1, 0])
    with pytest.raises(KeyError, match="terminated"):
        buf.add({k: v for k, v in good.items() if k not in ("terminated",)})
    with pytest.raises(ValueError, match="num_envs"):
        ReplayBuffer(4, num_envs=1).add(good)
    assert len(buf) == 1 * 2  # failed adds wrote nothing
    assert buf.obs[2:].sum() == 0


def test_multi_dim_reward():
    buf = ReplayBuffer(4, num_envs=2)
    step = {"obs": np.zeros(2), "act": np.zeros(2), "rew": np.ones((2, 3)),
            "terminated": np.array([True, False]), "truncated": np.zeros(2, bool),
            "obs_next": np.zeros(2)}
    _, ep_rew, _, _ = buf.add(step)
    assert ep_rew.shape == (2, 3) and ep_rew.tolist() == [[1, 1, 1], [0, 0, 0]]
    _, ep_rew, _ep_len, _ = buf.add({**step, "terminated": np.array([False, True])})
    assert ep_rew.tolist() == [[0, 0, 0], [2, 2, 2]]


def test_sample_and_getitem_forms():
    buf = ReplayBuffer(5, seed=1)
    with pytest.raises(ValueError, match="empty"):
        buf.sample_index(3)
    with pytest.raises(IndexError):
        buf[:]
    assert repr(buf) == "ReplayBuffer()"
    for i in range(7):
        buf.add({"obs": i, "act": i, "rew": float(i), "done": i == 3, "obs_next": i + 1})
    assert buf.sample_index(0).tolist() == [2, 3, 4, 0, 1]
    assert buf[:].obs.tolist() == [2, 3, 4, 5, 6]
    assert buf[1:3].obs.tolist() == [3, 4]
    assert buf[-1].obs == 4  # ints index slots, slices index time order
    assert buf[[0, 1]].obs.tolist() == [5, 6]
    assert buf.sample_index(-1).shape == (0,)
    idx = buf.sample_index(1000)
    assert set(idx.tolist()) == {0, 1, 2, 3, 4}
    again = ReplayBuffer(5, seed=1)
    for i in range(7):
        again.add({"obs": i, "act": i, "rew": float(i), "done": i == 3, "obs_next": i + 1})
    assert np.array_equal(again.sample_index(1000), idx)  # seedable
    assert buf.get([0, 1], "missing", default="x") == "x"
    assert buf.get([0, 1], "done").tolist() == [False, False]
    assert buf.get(3, "done")


def test_reset_keep_statistics_and_truncate_unfinished():
    buf = ReplayBuffer(5)
    for i in range(3):
        buf.add({"obs": i, "act": 0, "rew": 1.0, "done": False, "obs_next": i + 1})
    buf.reset(keep_statistics=True)
    assert len(buf) == 0 and buf.unfinished_index().tolist() == []
    index, ep_rew, ep_len, _ = buf.add({"obs": 3, "act": 0, "rew": 1.0, "done": True,
                                        "obs_next": 4})
    assert index.tolist() == [0] and ep_rew.tolist() == [4.0] and ep_len.tolist() == [4]
    assert buf.prev(0) == 0
    buf.reset()
    buf.add({"obs": 0, "act": 0, "rew": 1.0, "done": False, "obs_next": 1})
    buf.add({"obs": 1, "act": 0, "rew": 1.0, "done": False, "obs_next": 2})
    assert buf.truncate_unfinished().tolist() == [1]
    assert buf.truncated[1] and buf.next(1) == 1 and buf.unfinished_index().tolist() == []
    _, ep_rew, ep_len, ep_start = buf.add({"obs": 5, "act": 0, "rew": 1.0, "done": True,
                                           "obs_next": 6})
    assert ep_len.tolist() == [1] and ep_start.tolist() == [2] and buf.prev(2) == 2


def test_truncate_unfinished_of_some_envs_ends_only_their_episodes():
    """``env_ids``: a collector ends the episodes of a restarted worker's envs only; the other
    envs' episodes go on linking their next steps."""
    buf = ReplayBuffer(16, num_envs=3)
    for t in range(2):
        buf.add({"obs": [t] * 3, "act": [0] * 3, "rew": [1.0] * 3, "done": [False] * 3,
                 "obs_next": [t + 1] * 3})  # fmt: skip
    assert buf.truncate_unfinished(env_ids=[1]).tolist() == [4]
    assert buf.truncated[4] and not buf.truncated[3] and not buf.truncated[5]
    assert buf.unfinished_index().tolist() == [3, 5]
    buf.add({"obs": [2] * 3, "act": [0] * 3, "rew": [1.0] * 3, "done": [False] * 3,
             "obs_next": [3] * 3})  # fmt: skip
    assert buf.next(3) == 6 and buf.next(5) == 8  # env 0 and 2 go on
    assert buf.next(4) == 4 and buf.prev(7) == 7  # env 1's next step starts a new episode
    assert buf.truncate_unfinished(env_ids=np.array([], dtype=np.int64)).tolist() == []


def test_overwritten_newest_step_starts_fresh_chain():
    buf = ReplayBuffer(3, num_envs=2)
    add = lambda e, i: buf.add(  # noqa: E731
        {"obs": i, "act": 0, "rew": 0.0, "done": False, "obs_next": i + 1}, env_ids=[e]
    )
    add(0, 0)  # slot 0, env 0's newest step
    add(1, 1)
    add(1, 2)
    add(1, 3)  # overwrites slot 0
    assert buf.unfinished_index().tolist() == [0]  # env 1's newest, slot 0
    add(0, 4)  # env 0's previous step is gone
    assert buf.prev(1) == 1
    assert buf.prev(2) == 2 and buf.next(2) == 0  # slot 2 (obs 2) lost its predecessor


# --- files ---------------------------------------------------------------------------------------


def _dict_obs_buffer(**kw):
    buf = ReplayBuffer(6, num_envs=2, seed=3, **kw)
    rng = np.random.default_rng(0)
    for i in range(9):
        obs = {"img": rng.integers(0, 255, (2, 2, 3), dtype=np.uint8),
               "vec": {"pos": rng.normal(size=(2, 2)).astype(np.float32), "id": np.array([i, i])}}
        buf.add({"obs": obs, "act": rng.normal(size=(2, 1)), "rew": rng.normal(size=2),
                 "terminated": np.array([i % 4 == 3, False]),
                 "truncated": np.array([False, i == 5]),
                 "obs_next": obs, "info": {"flag": np.array([b"a", b"bb"])}})
    return buf


def _assert_buffers_equal(a, b):
    _assert_same_state(a, b)
    assert len(a) == len(b) and a.maxsize == b.maxsize and a.stack_num == b.stack_num
    assert a.ignore_obs_next == b.ignore_obs_next and a.num_envs == b.num_envs
    for (pa, xa, _), (pb, xb, _) in zip(a._leaves, b._leaves, strict=True):
        assert pa == pb and xa.dtype == xb.dtype and np.array_equal(xa, xb)
    arrays_a, arrays_b = a.layout.arrays(), b.layout.arrays()
    assert arrays_a.keys() == arrays_b.keys()
    for name, value in arrays_a.items():
        assert np.array_equal(value, arrays_b[name]), name
    assert str(a) == str(b)
    assert np.array_equal(a.sample_index(50), b.sample_index(50))  # generator state too


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("ignore_obs_next", [False, True])
def test_hdf5_round_trip_nested(tmp_path, compression, ignore_obs_next):
    buf = _dict_obs_buffer(stack_num=2, ignore_obs_next=ignore_obs_next)
    path = tmp_path / "buf.h5"
    buf.save_hdf5(path, compression=compression)
    with h5py.File(path) as f:
        assert isinstance(f["data/obs/vec"], h5py.Group)
        assert f["data/obs/vec/pos"].dtype == np.float32
        assert f["data/obs/vec/pos"].compression == compression
        assert list(f["data"].keys())[:3] == ["obs", "act", "rew"]
    loaded = ReplayBuffer.load_hdf5(path)
    _assert_buffers_equal(loaded, buf)
    assert os.listdir(tmp_path) == ["buf.h5"]


def test_pickle_round_trip_nested():
    buf = _dict_obs_buffer()
    _assert_buffers_equal(pickle.loads(pickle.dumps(buf)), buf)
    _assert_buffers_equal(copy.deepcopy(buf), buf)


def test_hdf5_of_a_buffer_not_yet_full_holds_only_what_was_added(tmp_path):
    # a checkpoint early in a 1M-frame Atari run must not write the whole preallocated storage
    buf = ReplayBuffer(50_000)
    frame = np.arange(64 * 64, dtype=np.uint8).reshape(1, 64, 64)
    for i in range(300):
        buf.add({"obs": frame + i % 7, "act": np.array([i % 3]), "rew": np.array([float(i)]),
                 "terminated": np.array([i % 50 == 10]), "truncated": np.array([False])})
    path = tmp_path / "partial.h5"
    buf.save_hdf5(path)
    assert os.path.getsize(path) < 0.1 * 50_000 * frame.nbytes
    loaded = ReplayBuffer.load_hdf5(path)
    _assert_buffers_equal(loaded, buf)
    # and it keeps filling where it was
    loaded.add({"obs": frame, "act": np.array([0]), "rew": np.array([1.0]),
                "terminated": np.array([True]), "truncated": np.array([False])})
    assert len(loaded) == 301 and loaded.prev(np.array([300]))[0] == 299


def test_hdf5_of_empty_buffer(tmp_path):
    buf = ReplayBuffer(3, num_envs=2, stack_num=2)
    buf.save_hdf5(tmp_path / "e.h5")
    loaded = ReplayBuffer.load_hdf5(tmp_path / "e.h5")
    assert len(loaded) == 0 and loaded.num_envs == 2 and loaded.stack_num == 2


def test_hdf5_refuses_object_arrays_and_writes_atomically(tmp_path, monkeypatch):
    path = tmp_path / "buf.h5"
    good = _dict_obs_buffer()
    good.save_hdf5(path)
    before = path.read_bytes()

    bad = ReplayBuffer(3)
    bad.add({"obs": 0, "act": 0, "rew": 0.0, "done": False, "obs_next": 0,
             "info": {"note": np.array("some text")}})
    assert bad.info.note.dtype == object
    with pytest.raises(TypeError, match=r"'info/note'.*never pickles"):
        bad.save_hdf5(path)
    assert path.read_bytes() == before

    # a failure in the middle of writing leaves the old file and no temporary file
    calls = {"n": 0}
    real = h5py.Group.create_dataset

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 10:
            raise OSError("disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", flaky)
    with pytest.raises(OSError, match="disk full"):
        _dict_obs_buffer().save_hdf5(path)
    monkeypatch.undo()
    assert path.read_bytes() == before

    def no_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError, match="rename failed"):
        _dict_obs_buffer().save_hdf5(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["buf.h5"]
    _assert_buffers_equal(ReplayBuffer.load_hdf5(path), good)


def test_load_hdf5_rejects_other_files(tmp_path):
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a"] = np.zeros(3)
    with pytest.raises(ValueError, match="not an rlblocks buffer"):
        ReplayBuffer.load_hdf5(tmp_path / "x.h5")

    # a file names its parts by registry name; one that is not installed is refused by name,
    # and nothing the file names is imported
    ReplayBuffer(3).save_hdf5(tmp_path / "o.h5")
    with h5py.File(tmp_path / "o.h5", "r+") as f:
        f.attrs["parts"] = '{"layout": ["os.system:not-a-part", {}], "sampler": ["uniform", {}]}'
    with pytest.raises(ValueError, match="not-a-part"):
        ReplayBuffer.load_hdf5(tmp_path / "o.h5")


# --- conformance kit and registration ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs", [{}, {"stack_num": 3}, {"ignore_obs_next": True}, {"seed": 0}]
)
def test_check_buffer_passes(kwargs):
    check_buffer(lambda size, num_envs: ReplayBuffer(size, num_envs=num_envs, **kwargs),
                 time_ordered=True)


def test_check_buffer_catches_broken_links():
    class Broken(ReplayBuffer):
        def next(self, index):
            return np.asarray(index)  # claims every step ends its episode

    with pytest.raises(AssertionError, match="next"):
        check_buffer(lambda size, num_envs: Broken(size, num_envs=num_envs))

    class Unordered(ReplayBuffer):
        def sample_index(self, batch_size):
            return np.sort(super().sample_index(batch_size))

    with pytest.raises(AssertionError, match="insertion order"):
        check_buffer(lambda size, num_envs: Unordered(size, num_envs=num_envs), time_ordered=True)

    class EnvsUnordered(ReplayBuffer):  # even per env: newest first
        def sample_index(self, batch_size):
            return super().sample_index(batch_size)[::-1].copy()

    with pytest.raises(AssertionError, match="env 0's steps out of insertion order"):
        check_buffer(lambda size, num_envs: EnvsUnordered(size, num_envs=num_envs))


def test_core_parts_are_registered_by_name():
    import rlblocks
    from rlblocks.replay import SequenceSampler, SharedRing, UniformSampler
    from rlblocks.replay._specs import REPLAY, SEQUENCE, UNIFORM

    assert (REPLAY.part, UNIFORM.part, SEQUENCE.part) == ("layout", "sampler", "sampler")
    assert REPLAY.load() is SharedRing
    assert UNIFORM.load() is UniformSampler and SEQUENCE.load() is SequenceSampler
    buf = rlblocks.make_buffer("replay", 10, num_envs=2, stack_num=2, ignore_obs_next=True)
    assert type(buf) is ReplayBuffer and isinstance(buf.layout, SharedRing)
    assert buf.stack_num == 2 and buf.ignore_obs_next and buf.maxsize == 10
    assert buf.parts() == {"layout": ("replay", {}), "sampler": ("uniform", {})}


# --- memory-mapped storage ---------------------------------------------------------------------


def _mm_step(t: int, n: int = 2) -> dict:
    uid = np.arange(t * n, t * n + n)
    return {"obs": {"uid": uid, "pix": np.full((n, 4), t, np.uint8)}, "act": uid % 2,
            "rew": np.ones(n), "terminated": np.array([t % 5 == 4] * n),
            "truncated": np.zeros(n, bool), "obs_next": {"uid": uid + 100,
                                                         "pix": np.zeros((n, 4), np.uint8)}}


@pytest.mark.parametrize("name", ["replay", "vector"])
def test_memmap_storage_keeps_arrays_in_files_and_reopens_after_flush(tmp_path, name) -> None:
    import rlblocks

    buf = rlblocks.make_buffer(name, size=16, num_envs=2, storage="memmap", path=str(tmp_path))
    for t in range(11):
        buf.add(_mm_step(t))
    assert isinstance(buf.obs.pix, np.memmap)
    assert (tmp_path / "data.obs.pix.npy").exists()
    buf.flush()
    again = rlblocks.make_buffer(name, size=16, num_envs=2, storage="memmap", path=str(tmp_path))
    idx = buf.sample_index(0)
    assert np.array_equal(again.sample_index(0), idx)
    assert np.array_equal(again[:].obs.uid, buf[:].obs.uid)
    assert np.array_equal(again.prev(idx), buf.prev(idx))
    a, b = buf.add(_mm_step(11)), again.add(_mm_step(11))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="differs from this one: size 16 there, 32 here"):
        rlblocks.make_buffer(name, size=32, num_envs=2, storage="memmap", path=str(tmp_path))


@pytest.mark.parametrize("name", ["replay", "vector"])
def test_memmap_flush_interrupted_by_a_crash_leaves_the_previous_flush(tmp_path, name,
                                                                      monkeypatch) -> None:
    import os

    import rlblocks

    buf = rlblocks.make_buffer(name, size=16, num_envs=2, storage="memmap", path=str(tmp_path))
    for t in range(5):
        buf.add(_mm_step(t))
    buf.flush()
    kept = buf[:].obs.uid.tolist()
    idx = buf.sample_index(0)
    links = buf.prev(idx).tolist(), buf.next(idx).tolist(), buf.unfinished_index().tolist()
    for t in range(5, 7):  # (no valid slot is overwritten: the mapped data stays as flushed)
        buf.add(_mm_step(t))

    def crash(*args, **kwargs):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)  # dies after writing the new state, before the swap
    with pytest.raises(OSError, match="power cut"):
        buf.flush()
    monkeypatch.undo()
    again = rlblocks.make_buffer(name, size=16, num_envs=2, storage="memmap", path=str(tmp_path))
    assert len(again) == len(kept) and again[:].obs.uid.tolist() == kept
    assert again.sample_index(0).tolist() == idx.tolist()
    assert (again.prev(idx).tolist(), again.next(idx).tolist(),
            again.unfinished_index().tolist()) == links


def test_memmap_path_of_another_buffer_type_is_refused_by_name(tmp_path) -> None:
    import rlblocks

    buf = rlblocks.make_buffer("vector", size=16, num_envs=2, storage="memmap", path=str(tmp_path))
    buf.add(_mm_step(0))
    buf.flush()
    with pytest.raises(ValueError, match=r"layout 'vector' there, 'replay' here"):
        rlblocks.make_buffer("replay", size=16, num_envs=2, storage="memmap", path=str(tmp_path))


def test_memmap_storage_needs_a_path() -> None:
    with pytest.raises(ValueError, match="path"):
        ReplayBuffer(8, storage="memmap")


_CHILD = """
import resource, sys
import numpy as np
from rlblocks.replay import ReplayBuffer
# RLIMIT_DATA caps the process's private memory (heap and anonymous maps) at what it uses now
# plus 300 MB; shared file mappings (the memmap buffer) do not count against it
used = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmData")) * 1024
limit = used + 300 * 2**20
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
try:  # the limit holds: a RAM buffer of the same size cannot be allocated
    np.ones((40_000, 24_576), np.uint8)
    sys.exit("RAM allocation of ~940 MB succeeded under the limit")
except MemoryError:
    pass
buf = ReplayBuffer(40_000, num_envs=8, storage="memmap", path=sys.argv[1], seed=0)
frame, flag, rew = np.zeros((8, 24_576), np.uint8), np.zeros(8, bool), np.ones(8)
for t in range(0, 40_000, 8):
    frame[:] = t // 1000
    buf.add({"obs": frame, "act": np.arange(t, t + 8), "rew": rew, "terminated": flag,
             "truncated": flag})
batch, idx = buf.sample(64)
assert np.array_equal(batch.act, idx) and len(buf) == 40_000
assert (batch.obs[:, -1] == idx // 1000).all()
print("ok")
"""


def test_memmap_buffer_larger_than_the_process_memory_limit_fills_and_samples(tmp_path) -> None:
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_DATA counting only private memory is Linux behaviour")
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_sample_indices_is_sample_index_under_the_architecture_name() -> None:
    buf = ReplayBuffer(8)
    for i in range(5):
        buf.add({"obs": i, "act": i, "rew": 0.0, "done": i == 2, "obs_next": i + 1})
    assert buf.sample_indices(0).tolist() == buf.sample_index(0).tolist() == [0, 1, 2, 3, 4]


# --- the sequence sampler ------------------------------------------------------------------------


def _episodes_buffer(sampler: object) -> ReplayBuffer:
    """Two envs, episodes of lengths 5, 3, 6 (env 0) and 4, 7 (env 1), obs = (env, episode, t)."""
    buf = ReplayBuffer(64, num_envs=2, seed=0, sampler=sampler)
    lengths = {0: [5, 3, 6], 1: [4, 7]}
    for env, lens in lengths.items():
        for ep, n in enumerate(lens):
            for t in range(n):
                buf.add({"obs": np.array([env, ep, t], np.float32), "act": np.array(0),
                         "rew": np.array(1.0), "terminated": np.array(t == n - 1),
                         "truncated": np.array(False),
                         "obs_next": np.array([env, ep, t + 1], np.float32)}, env_ids=[env])
    return buf


def test_sequence_windows_stay_in_one_episode_and_mask_the_rest() -> None:
    from rlblocks.replay import SequenceSampler

    buf = _episodes_buffer(SequenceSampler(length=4))
    batch, idx = buf.sample(256)
    obs, mask = batch.obs, batch.mask
    assert idx.shape == (256, 4) and mask.shape == (256, 4) and mask[:, 0].all()
    for b in range(256):
        real = obs[b][mask[b]]
        assert (real[:, :2] == real[0, :2]).all()  # one env, one episode
        assert np.array_equal(real[:, 2], real[0, 2] + np.arange(len(real)))  # consecutive
        if not mask[b].all():  # cut short only by the episode's end, which then repeats
            assert batch.done[b][mask[b]][-1]
            assert (idx[b][~mask[b]] == idx[b][mask[b]][-1]).all()
    assert (~mask).any() and mask.all(axis=1).any()


def test_sequence_burn_in_comes_first_and_is_left_out_of_learn_mask() -> None:
    from rlblocks.replay import SequenceSampler

    buf = _episodes_buffer(SequenceSampler(length=3, burn_in=2, start="any"))
    batch, idx = buf.sample(256)
    assert idx.shape == (256, 5)
    assert not batch.learn_mask[:, :2].any()
    assert np.array_equal(batch.learn_mask[:, 2:], batch.mask[:, 2:])
    t0 = batch.obs[:, 0, 2]
    # a window begins burn_in steps before its first learned step, or at the episode's start
    assert ((t0 == 0) | (batch.obs[:, 2, 2] == t0 + 2)).all()
    with pytest.raises(ValueError, match="burn_in"):
        SequenceSampler(burn_in=-1)


def test_sequence_windows_can_start_only_at_episode_starts() -> None:
    import rlblocks

    buf = rlblocks.make_buffer("replay", 64, 2, sampler="sequence", length=3, start="episode")
    buf.update(_episodes_buffer(None))
    batch, _ = buf.sample(64)
    assert (batch.obs[:, 0, 2] == 0).all()


def test_a_buffer_with_a_one_key_dict_pickles():
    # the concepts page's stacking example stores obs={'id': i}: one key under a dict
    buf = ReplayBuffer(9, stack_num=4, ignore_obs_next=True)
    for i in range(16):
        buf.add(Batch(obs={"id": i}, act=i, rew=i, terminated=i % 5 == 0, truncated=False,
                      info={"x": float(i)}))  # fmt: skip
    loaded = pickle.loads(pickle.dumps(buf))
    _assert_buffers_equal(loaded, buf)
    step = Batch(obs={"id": 16}, act=16, rew=16, terminated=False, truncated=False, info={"x": 1.0})
    loaded.add(step)
    buf.add(step)
    _assert_buffers_equal(loaded, buf)
    # stacked reads stop at episode starts (15 ended one): [12..15], then 16 repeated
    assert loaded[:].obs.id[-2:].tolist() == [[12, 13, 14, 15], [16, 16, 16, 16]]


def test_episode_links_are_int64_slots():
    buf = ReplayBuffer(5)
    for i in range(3):
        buf.add(Batch(obs=i, act=i, rew=i, terminated=i == 1, truncated=False, obs_next=i + 1))
    idx = buf.sample_index(0)
    for links in (buf.prev(idx), buf.next(idx), buf.prev(np.array([0, 1], np.int32))):
        assert links.dtype == np.int64
    assert buf.next(idx).tolist() == [1, 1, 2] and buf.prev(idx).tolist() == [0, 0, 2]
    assert isinstance(buf.prev(2), np.int64)


def test_reading_info_that_no_step_stored_says_how_infos_get_stored():
    # the concepts page adds info={} with every step: an empty dict stores no column
    buf = ReplayBuffer(5)
    buf.add(Batch(obs=0, act=0, rew=0.0, terminated=False, truncated=False, obs_next=1, info={}))
    assert "info" not in buf.keys()  # noqa: SIM118 - the stored keys, not a dict
    with pytest.raises(AttributeError, match=r"no step added an info key.*info_keys"):
        buf.info  # noqa: B018
