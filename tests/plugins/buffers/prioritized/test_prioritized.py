"""Prioritized replay: sampling by priority, importance weights, beta annealing, the segment
tree, conformance of both forms, and DQN with prioritized replay on CartPole."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.testing.buffer_checks import check_buffer
from rlblocks_buffer_prioritized import (
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    PrioritizedVectorReplayBuffer,
)
from rlblocks_buffer_prioritized.segment_tree import SumMinTree
from rlblocks_buffer_vector import PerEnvLayout

FORMS = [PrioritizedReplayBuffer, PrioritizedVectorReplayBuffer]


def filled(cls, n=8, **kw):
    buf = cls(n, num_envs=1, seed=0, **kw)
    for t in range(n):
        buf.add({"obs": np.array([t]), "act": np.array([0]), "rew": np.array([1.0]),
                 "terminated": np.array([t % 4 == 3]), "truncated": np.array([False]),
                 "obs_next": np.array([t + 1])})
    return buf


@pytest.mark.parametrize("cls", FORMS)
def test_prioritized_buffers_pass_the_buffer_conformance_checks(cls) -> None:
    check_buffer(lambda size, num_envs: cls(size, num_envs=num_envs))


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("capacity", [1, 7, 33, 1000, 40_000])
def test_segment_tree_sum_min_and_prefix_search_match_numpy(capacity: int, compiled: bool) -> None:
    rng = np.random.default_rng(capacity)
    tree, leaves = SumMinTree(capacity), rng.random(capacity) + 0.01
    if compiled and not tree.compiled:
        pytest.skip("numba is not installed")
    tree.compiled = compiled
    tree.set(np.arange(capacity), leaves)
    for _ in range(3):  # a few small updates after the bulk one
        i, v = rng.integers(capacity, size=5), rng.random(5) + 0.01
        tree.set(i, v)
        leaves[i] = v
    assert tree.total() == pytest.approx(leaves.sum())
    assert tree.min() == pytest.approx(leaves.min())
    u = rng.random(2000) * leaves.sum()
    want = np.minimum(np.searchsorted(np.cumsum(leaves), u, side="right"), capacity - 1)
    assert np.array_equal(tree.find_prefix_sum(u), want)


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_segment_tree_never_returns_an_empty_leaf(compiled: bool) -> None:
    tree = SumMinTree(100)
    tree.compiled = compiled and tree.compiled
    tree.set(np.array([3, 50]), np.array([1.0, 2.0]))
    found = tree.find_prefix_sum(np.array([0.0, 0.999, 1.0, 2.9999, 3.0, 3.5]))
    assert set(found.tolist()) <= {3, 50}


def test_compiled_kernels_run_as_python_give_what_numba_and_numpy_give() -> None:
    # Coverage cannot see inside numba-compiled code, and a kernel's Python source is what
    # numba compiles: running it as plain Python (``py_func``) on the same inputs checks the
    # source itself, including its rare branches (a walk sharing its parent with the walk
    # before, one value for all leaves). Not _find_nb: it adds comparisons as integers, which
    # numba does and numpy's bools do not (np.True_ + np.True_ is True), so only its compiled
    # form means what it says; the tests above check that form against numpy's searchsorted.
    seg = pytest.importorskip("rlblocks_buffer_prioritized.segment_tree")
    if seg.njit is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(7)
    capacity = 300
    trees = {name: SumMinTree(capacity) for name in ("numba", "python", "numpy")}
    trees["numpy"].compiled = False
    index = np.sort(rng.integers(capacity - 40, size=200))  # sorted, repeats, 40 empty leaves
    value = rng.random(200) + 0.01
    for name, tree in trees.items():
        if name == "python":
            seg._set_nb.py_func(tree._sum, tree._min, tree._starts, index, value)
            seg._set_nb.py_func(tree._sum, tree._min, tree._starts, np.array([5, 9]),
                                np.array([0.25]))  # fmt: skip
        else:
            tree.set(index, value)
            tree.set(np.array([5, 9]), 0.25)
    for name in ("python", "numpy"):
        np.testing.assert_allclose(trees[name]._sum, trees["numba"]._sum, rtol=1e-12)
        np.testing.assert_array_equal(trees[name]._min, trees["numba"]._min)
    total = trees["numba"].total()
    draws = np.concatenate([rng.random(500) * total, [0.0, total, total * (1 + 1e-12)]])
    want = trees["numba"].find_prefix_sum(draws)
    assert trees["numba"].leaves[want[-2:]].min() > 0  # past the end: still a non-empty leaf
    np.testing.assert_array_equal(trees["numpy"].find_prefix_sum(draws), want)
    u = rng.random(64)
    stratified = seg._find_stratified_nb.py_func(trees["python"]._sum, trees["python"]._starts,
                                                 u.copy())  # fmt: skip
    np.testing.assert_array_equal(stratified, trees["numba"]._find_stratified_owned(u.copy()))
    np.testing.assert_array_equal(trees["numpy"]._find_stratified_owned(u.copy()), stratified)


@pytest.mark.parametrize("cls", FORMS)
def test_sampling_frequency_is_proportional_to_priority_to_the_alpha(cls) -> None:
    buf = filled(cls, alpha=0.5)
    buf.update_priority(np.arange(8), np.array([1, 1, 1, 1, 1, 1, 1, 16.0]) - 1e-6)
    counts = np.bincount(buf.sample_index(64_000), minlength=8)
    expected = np.array([1, 1, 1, 1, 1, 1, 1, 4.0]) / 11  # sqrt of the priorities
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)


def test_importance_weights_are_normalised_and_follow_beta() -> None:
    buf = filled(PrioritizedReplayBuffer, alpha=1.0, beta=0.5)
    buf.update_priority(np.arange(8), np.array([1, 2, 4, 8, 1, 1, 1, 1.0]) - 1e-6)
    batch = buf[np.array([0, 1, 2, 3])]
    np.testing.assert_allclose(batch.weight, [1.0, 2**-0.5, 4**-0.5, 8**-0.5], rtol=1e-5)
    assert batch.weight.dtype == np.float32
    sampled, idx = buf.sample(16)
    np.testing.assert_allclose(sampled.weight, buf.weight(idx))


def test_new_transitions_get_the_largest_priority_so_far() -> None:
    buf = filled(PrioritizedReplayBuffer, n=16, alpha=1.0)
    buf.update_priority(np.array([0, 1]), np.array([5.0, 0.1]))
    idx, *_ = buf.add({"obs": np.array([99]), "act": np.array([0]), "rew": np.array([0.0]),
                       "terminated": np.array([False]), "truncated": np.array([False]),
                       "obs_next": np.array([100])})
    assert buf.weight(idx)[0] == pytest.approx(buf.weight(np.array([0]))[0])


def test_beta_anneals_linearly_with_env_steps() -> None:
    buf = PrioritizedVectorReplayBuffer(16, num_envs=2, beta=0.4, beta_final=1.0,
                                        beta_anneal_steps=1000)
    buf.set_env_step(0)
    assert buf.beta == pytest.approx(0.4)
    buf.set_env_step(500)
    assert buf.beta == pytest.approx(0.7)
    buf.set_env_step(5000)
    assert buf.beta == pytest.approx(1.0)


def test_update_priority_with_wrong_length_says_what_to_pass() -> None:
    buf = filled(PrioritizedReplayBuffer)
    with pytest.raises(ValueError, match="one per sampled index"):
        buf.update_priority(np.array([0, 1]), np.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("cls", FORMS)
def test_hdf5_round_trip_keeps_priorities_and_beta(cls, tmp_path) -> None:
    buf = filled(cls, alpha=0.7, beta=0.3, beta_anneal_steps=100)
    buf.update_priority(np.arange(8), np.arange(8.0))
    buf.set_env_step(50)
    buf.save_hdf5(tmp_path / "per.h5")
    loaded = cls.load_hdf5(tmp_path / "per.h5")
    assert loaded.sampler.alpha == 0.7 and loaded.beta == pytest.approx(buf.beta)
    np.testing.assert_allclose(loaded.weight(np.arange(8)), buf.weight(np.arange(8)))
    assert np.array_equal(loaded.sample_index(32), buf.sample_index(32))


def test_make_buffer_by_name_takes_per_options_and_rejects_bad_ones() -> None:
    buf = rlblocks.make_buffer("prioritized", size=64, num_envs=4, alpha=0.6, beta=0.5)
    assert isinstance(buf.sampler, PrioritizedSampler) and buf.sampler.alpha == 0.6
    assert isinstance(buf.layout, PerEnvLayout)  # what "prioritized" always built
    with pytest.raises(Exception, match="alpha"):
        rlblocks.make_buffer("prioritized", size=64, num_envs=4, alpha=-1.0)


def test_dqn_nstep_update_uses_weights_and_writes_back_priorities() -> None:
    from rlblocks_algo_dqn.config import DQNConfig
    from rlblocks_algo_dqn.dqn import DQNPolicy

    obs_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    policy = DQNPolicy(obs_space, gym.spaces.Discrete(2), DQNConfig(n_step=3))
    buf = PrioritizedVectorReplayBuffer(32, num_envs=2, seed=0)
    for t in range(10):
        buf.add({"obs": np.full((2, 1), t, np.float32), "act": np.array([0, 1]),
                 "rew": np.array([1.0, -1.0]), "terminated": np.array([t == 9, False]),
                 "truncated": np.array([False, False]),
                 "obs_next": np.full((2, 1), t + 1, np.float32)})
    before = buf.sampler.tree.leaves.copy()
    policy.update(8, buf)
    # td errors replaced the initial priority
    assert not np.allclose(buf.sampler.tree.leaves, before)
    assert buf.sampler.state()[0]["max_priority"] >= 1.0


@pytest.mark.slow
def test_dqn_with_prioritized_replay_solves_cartpole(tmp_path) -> None:
    result = rlblocks.train("dqn", buffer="prioritized", overrides=["buffer.alpha=0.6"], seed=0,
                            loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
