"""Every replay composition: layout x sampler x relabeller x writer x storage x frame stacking,
with n-step targets, hdf5 files and resumed runs (issue: composable replay).

Each combination is built by name through ``rlblocks.make_buffer``, fed the same random
sequence of steps of interleaved envs (goal-dict observations carrying a unique id, so every
part applies), and checked through the public API only: episode links, sampling, the columns a
sampler adds, relabelled rows, n-step targets over the buffer's batch view, and the round trips
through an hdf5 file and through ``read_hdf5`` into a buffer of the same make-up (a resumed run),
storage kind kept.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
import rlblocks.contracts._errors
from rlblocks.algo import nstep_return
from rlblocks.contracts import ConfigError

pytest.importorskip("rlblocks_buffer_vector")
pytest.importorskip("rlblocks_buffer_prioritized")
pytest.importorskip("rlblocks_buffer_her")
pytest.importorskip("rlblocks_buffer_cached")

NUM_ENVS = 3
GOAL = 2


def goal_reward(achieved: np.ndarray, desired: np.ndarray, info: object) -> np.ndarray:
    """0 when the goal is reached, else -1 (vectorised; importable by path for files)."""
    return -(np.abs(np.asarray(achieved) - np.asarray(desired)).sum(axis=-1) > 0.5).astype(float)


LAYOUTS = ["replay", "vector"]
SAMPLERS = ["uniform", "prioritized", "sequence"]
RELABELS = [None, "her"]
WRITERS = [None, "cached"]
STORAGES = ["memory", "memmap"]
STACKS = [1, 3]
COMBOS = list(itertools.product(LAYOUTS, SAMPLERS, RELABELS, WRITERS, STORAGES, STACKS))


def make(combo: tuple, path: str, **extra: object) -> rlblocks.ReplayBuffer:
    layout, sampler, relabel, writer, storage, stack = combo
    options: dict[str, object] = {"seed": 7, "stack_num": stack}
    if storage == "memmap":
        options.update(storage="memmap", path=path)
    if sampler == "prioritized":
        options.update(alpha=0.6, beta=0.4)
    if sampler == "sequence":
        options.update(length=4)
    if relabel == "her":
        options.update(k=3, compute_reward=f"{__name__}:goal_reward")
    if writer == "cached":
        options.update(cache_size=32)
    options.update(extra)
    return rlblocks.make_buffer(layout, 60, NUM_ENVS, sampler=sampler, relabel=relabel,
                                writer=writer, **options)


def steps(seed: int, count: int = 40) -> list[tuple[np.ndarray, dict]]:
    """A random sequence of ``(env_ids, batch)`` adds: random env subsets, episodes of random
    length ending terminated or truncated; ``obs.uid`` numbers every row."""
    rng = np.random.default_rng(seed)
    out, uid = [], 0
    for _ in range(count):
        k = int(rng.integers(1, NUM_ENVS + 1))
        envs = np.sort(rng.choice(NUM_ENVS, size=k, replace=False)).astype(np.int64)
        ids = np.arange(uid, uid + k, dtype=np.float32)
        uid += k
        ach = rng.integers(0, 2, (k, GOAL)).astype(np.float32)
        des = rng.integers(0, 2, (k, GOAL)).astype(np.float32)
        ach_next = rng.integers(0, 2, (k, GOAL)).astype(np.float32)
        term = rng.random(k) < 0.15
        trunc = ~term & (rng.random(k) < 0.1)
        batch = {
            "obs": {"uid": ids, "achieved_goal": ach, "desired_goal": des},
            "act": rng.integers(0, 2, k),
            "rew": goal_reward(ach_next, des, {}),
            "terminated": term,
            "truncated": trunc,
            "obs_next": {"uid": ids + 0.5, "achieved_goal": ach_next, "desired_goal": des},
        }
        out.append((envs, batch))
    return out


def check_links(buf: rlblocks.ReplayBuffer) -> None:
    """Links stay inside one env's episode and are each other's inverse."""
    valid = np.asarray(buf.sample_index(0), dtype=np.int64)
    assert len(valid) == len(buf) and len(np.unique(valid)) == len(valid)
    if not len(valid):
        return
    prev, nxt = np.asarray(buf.prev(valid)), np.asarray(buf.next(valid))
    env = np.asarray(buf.env_id)
    assert np.array_equal(env[prev], env[valid]) and np.array_equal(env[nxt], env[valid])
    done = np.asarray(buf.get(valid, "done"))
    assert np.array_equal(nxt[done], valid[done])  # nothing follows a done step
    moved = nxt != valid
    assert np.array_equal(np.asarray(buf.prev(nxt[moved])), valid[moved])
    uid = np.asarray(buf.get(valid, "obs", stack_num=1)["uid"])
    assert (np.asarray(buf.get(nxt[moved], "obs", stack_num=1)["uid"]) > uid[moved]).all()


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(str(x) for x in c))
def test_every_composition_works_and_round_trips(combo, tmp_path) -> None:
    layout, sampler, relabel, writer, storage, stack = combo
    if relabel and stack > 1:  # a relabeller reads single observations: refused by name
        with pytest.raises(ConfigError, match="stack_num"):
            make(combo, str(tmp_path / "mm"))
        return
    if relabel and sampler == "sequence":  # hindsight goals are per transition, not window
        with pytest.raises(ConfigError, match="draws windows"):
            make(combo, str(tmp_path / "mm"))
        return
    buf = make(combo, str(tmp_path / "mm"))
    assert buf.parts()["layout"][0] == layout and buf.parts()["sampler"][0] == sampler
    for envs, batch in steps(seed=COMBOS.index(combo)):
        buf.add(batch, env_ids=envs)
    assert len(buf) > 0
    check_links(buf)
    if writer == "cached":  # only whole episodes are in the buffer
        assert len(buf.unfinished_index()) == 0
        last = buf.sample_index(0)
        assert np.asarray(buf.get(last, "done"))[np.asarray(buf.next(last)) == last].all()

    batch, idx = buf.sample(16)
    if sampler == "sequence":
        assert idx.shape == (16, 4) and batch.mask.shape == (16, 4) and batch.mask[:, 0].all()
        # a window never crosses an episode end: masked steps repeat the last real one
        assert batch.obs.uid.shape[:2] == (16, 4)
    else:
        assert idx.shape == (16,)
        uid = batch.obs.uid
        assert uid.shape == ((16, stack) if stack > 1 else (16,))
    if sampler == "prioritized":
        assert batch.weight.shape == idx.shape and (batch.weight <= 1.0).all()
        buf.update_priority(idx, np.linspace(0.1, 2.0, 16))
    if relabel == "her" and sampler != "sequence":
        # relabelled rewards agree with the goal the row now carries
        ach = batch.obs_next.achieved_goal
        np.testing.assert_array_equal(batch.rew, goal_reward(ach, batch.obs.desired_goal, {}))
    if sampler != "sequence":
        # n-step pieces over the batch view: walking it by hand gives the same target
        view = buf.batch_view(batch, idx)
        ret, boot, disc = nstep_return(view, idx, gamma=0.9, n_step=3)
        cur, acc, scale, alive = idx.copy(), np.zeros(16), np.ones(16), np.ones(16, bool)
        for _ in range(3):
            acc += np.where(alive, scale * np.asarray(view.get(cur, "rew")), 0.0)
            scale = np.where(alive, scale * 0.9, scale)
            nxt = np.asarray(view.next(cur))
            alive &= nxt != cur
            last = cur
            cur = np.where(alive, nxt, cur)
        np.testing.assert_allclose(ret, acc)
        assert np.array_equal(boot, last)
        term = np.asarray(view.get(last, "terminated"), bool)
        np.testing.assert_allclose(disc, scale * ~term)

    # an hdf5 file rebuilds the same composition, in memory or mapped to files
    file = tmp_path / "buf.h5"
    buf.save_hdf5(file)
    if relabel == "her":  # the file names code (compute_reward): loaded only with consent
        with pytest.raises(rlblocks.contracts._errors.BufferFileError, match="trust_imports=True"):
            rlblocks.ReplayBuffer.load_hdf5(file)
    again = rlblocks.ReplayBuffer.load_hdf5(file, trust_imports=True)
    assert again.parts() == buf.parts()
    assert np.array_equal(again.sample_index(0), buf.sample_index(0))
    for name, value in buf.layout.arrays().items():
        assert np.array_equal(again.layout.arrays()[name], value), name
    # a resumed run reads the file into its own buffer: the storage kind stays
    resumed = make(combo, str(tmp_path / "resumed"))
    resumed.read_hdf5(file)
    assert resumed.storage == storage
    if storage == "memmap":
        assert isinstance(resumed.storage_arrays["act"], np.memmap)
    rng_state = buf.rng.bit_generator.state
    valid = buf.sample_index(0)
    for other in (again, resumed):
        assert np.array_equal(other.get(valid, "obs", stack_num=1)["uid"],
                              buf.get(valid, "obs", stack_num=1)["uid"])
        buf.rng.bit_generator.state = rng_state
        assert np.array_equal(other.sample_index(8), buf.sample_index(8))  # the generator too
    check_links(resumed)
    # both go on taking steps exactly alike
    for envs, step in steps(seed=99, count=8):
        out_a, out_b = resumed.add(step, env_ids=envs), buf.add(step, env_ids=envs)
        assert all(np.array_equal(x, y) for x, y in zip(out_a, out_b, strict=True))


@settings(max_examples=20, deadline=None)
@given(
    combo=st.sampled_from([
        c for c in COMBOS if c[4] == "memory" and not (c[2] and (c[5] > 1 or c[1] == "sequence"))
    ]),
    seed=st.integers(0, 10_000),
    count=st.integers(1, 80),
)
def test_random_add_sequences_keep_links_whole_for_any_composition(combo, seed, count) -> None:
    buf = make(combo, "")
    for envs, batch in steps(seed, count):
        buf.add(batch, env_ids=envs)
        check_links(buf)


def test_the_names_of_today_keep_working() -> None:
    from rlblocks_buffer_her import HindsightRelabeller
    from rlblocks_buffer_prioritized import PrioritizedSampler
    from rlblocks_buffer_vector import PerEnvLayout

    buf = rlblocks.make_buffer("prioritized", 64, 4, alpha=0.5)
    assert isinstance(buf.layout, PerEnvLayout) and isinstance(buf.sampler, PrioritizedSampler)
    buf = rlblocks.make_buffer("her", 64, 4, compute_reward=f"{__name__}:goal_reward")
    assert isinstance(buf.relabeller, HindsightRelabeller)
    with pytest.raises(ConfigError, match="is a sampler and sampler='sequence' names another"):
        rlblocks.make_buffer("prioritized", 64, 4, sampler="sequence")
    with pytest.raises(ConfigError, match="'vector' is a layout, not a relabeller"):
        rlblocks.make_buffer("replay", 64, 4, relabel="vector")
    with pytest.raises(ConfigError, match=r"'alpah' \(did you mean 'alpha'\?\)"):
        rlblocks.make_buffer("replay", 64, 4, sampler="prioritized", alpah=0.5)
