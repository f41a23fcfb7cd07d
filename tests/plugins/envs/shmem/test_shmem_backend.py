"""The shared-memory backend: conformance and every observation space it puts in shared memory.
Async stepping, faults and shutdown are pinned with subproc's tests (same worker machinery)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks.testing.env_checks import check_vector_env
from rlblocks_env_dummy.dummy import DummyVectorEnv
from rlblocks_env_shmem.shmem import ShmemVectorEnv


@pytest.mark.parametrize(("context", "num_workers"), [("fork", 3), ("spawn", 2)])
def test_shmem_passes_conformance_kit(context: str, num_workers: int) -> None:
    check_vector_env(functools.partial(ShmemVectorEnv, num_workers=num_workers, context=context))


@pytest.mark.parametrize(("num_workers", "local_envs"), [(1, 2), (2, 1), (None, None)])
def test_shmem_with_local_envs_passes_conformance_kit(
    num_workers: int | None, local_envs: int | None
) -> None:
    # (None, None): the default split, local envs on any machine with two cores or more
    check_vector_env(
        functools.partial(ShmemVectorEnv, num_workers=num_workers, local_envs=local_envs)
    )


NESTED = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-1.0, 1.0, shape=(2, 3), dtype=np.float32),
        "mode": gym.spaces.Discrete(5),
        "parts": gym.spaces.Tuple(
            (gym.spaces.MultiDiscrete([3, 4]), gym.spaces.MultiBinary(6))
        ),
    }
)
SPACES = {
    "box": gym.spaces.Box(0, 255, shape=(4, 4), dtype=np.uint8),
    "discrete": gym.spaces.Discrete(9),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 5, 7]),
    "multibinary": gym.spaces.MultiBinary(4),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,)))),
    "nested": NESTED,
}


class SpaceEnv(gym.Env):
    """Observations sampled from ``space`` with the env's seeded RNG; Box actions."""

    def __init__(self, space: gym.Space) -> None:
        self.observation_space = space
        self._sampler = copy.deepcopy(space)  # own RNG: envs in one process must not share it
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self._sampler.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self._sampler.sample(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        rew = float(np.sum(action))
        info = {"t": self.t} if self.t == 2 else {}
        return self._sampler.sample(), rew, self.t >= 3, False, info


def _flat(obs: Any) -> list[np.ndarray]:
    if isinstance(obs, dict):
        return [a for k in obs for a in _flat(obs[k])]
    if isinstance(obs, tuple):
        return [a for o in obs for a in _flat(o)]
    return [np.asarray(obs)]


@pytest.mark.parametrize("local_envs", [0, 1])
@pytest.mark.parametrize("name", SPACES)
def test_every_supported_space_matches_the_in_process_backend(name: str, local_envs: int) -> None:
    fns = [functools.partial(SpaceEnv, SPACES[name]) for _ in range(3)]
    dummy = DummyVectorEnv(fns)
    with ShmemVectorEnv(fns, num_workers=2, local_envs=local_envs) as shm:
        results = []
        for envs in (dummy, shm):
            out = [envs.reset(seed=3)]
            act = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
            out.append(envs.step(act))
            out.append(envs.step(act[[2, 0]], [2, 0]))
            results.append(out)
        (d_reset, d_step, d_sub), (s_reset, s_step, s_sub) = results
        assert type(s_reset[0]) is type(d_reset[0]) or isinstance(d_reset[0], dict)
        for d, s in ((d_reset[0], s_reset[0]), (d_step[0], s_step[0]), (d_sub[0], s_sub[0])):
            for a, b in zip(_flat(d), _flat(s), strict=True):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(d_step[1], s_step[1])
        assert d_step[4] == s_step[4] and d_sub[4] == s_sub[4] == [{"t": 2}, {"t": 2}]
    dummy.close()


class InfoEnv(gym.Env):
    """Infos of every kind a worker may pack: numpy and Python scalars in the same keys every
    step, and at some steps a key of its own, a mixed column and a value that is no scalar."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, k: int) -> None:
        self.k, self.t = k, 0

    def _info(self) -> dict[str, Any]:
        t, k = self.t, self.k
        info: dict[str, Any] = {"x": np.float64(t + k / 3), "c": np.float32(-k), "n": np.int64(t),
                                "ok": np.bool_(k % 2), "f": t / 7, "i": t * 10**12, "b": k > 1}
        if t == 2:
            info["only_then"] = [k, t]  # not a scalar: the infos go as they are
        if t == 3:
            info["x"] = float(info["x"]) if k == 0 else info["x"]  # one column of two types
        return info

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 5, self._info()


@pytest.mark.parametrize("local_envs", [0, 1])
def test_infos_arrive_with_the_keys_types_and_values_the_envs_gave(local_envs: int) -> None:
    fns = [functools.partial(InfoEnv, k) for k in range(4)]

    def same(a: list[dict], b: list[dict]) -> None:
        assert [list(d) for d in a] == [list(d) for d in b]  # keys in their order
        for da, db in zip(a, b, strict=True):
            for key in da:
                assert type(da[key]) is type(db[key]) and da[key] == db[key], key

    with DummyVectorEnv(fns) as dummy, ShmemVectorEnv(fns, num_workers=2,
                                                      local_envs=local_envs) as shm:
        same(dummy.reset(seed=0)[1], shm.reset(seed=0)[1])
        act = np.zeros((4, 1), np.float32)
        for _ in range(4):
            same(dummy.step(act)[4], shm.step(act)[4])
        same(dummy.step(act[[3, 1]], [3, 1])[4], shm.step(act[[3, 1]], [3, 1])[4])


@pytest.mark.parametrize("local_envs", [0, 1])
def test_returned_obs_are_copies_not_views_of_shared_memory(local_envs: int) -> None:
    with rlblocks.make_vector_env(
        "shmem", "CartPole-v1", num_envs=2, seed=0, local_envs=local_envs
    ) as envs:
        first, *_ = envs.step(np.array([0, 1]))
        kept = first.copy()
        envs.step(np.array([1, 0]))
        np.testing.assert_array_equal(first, kept)
        # rows written by the calling process and by the worker, and the action each got
        assert envs.local_envs == local_envs
        obs, _ = envs.reset(seed=3)
        with DummyVectorEnv([lambda: gym.make("CartPole-v1")] * 2) as ref:
            np.testing.assert_array_equal(ref.reset(seed=3)[0], obs)
            np.testing.assert_array_equal(
                ref.step(np.array([0, 1]))[0], envs.step(np.array([0, 1]))[0]
            )


def test_unsupported_space_says_to_use_subproc() -> None:
    space = gym.spaces.Text(5)
    with pytest.raises(ConfigError, match="backend='subproc'"):
        ShmemVectorEnv([functools.partial(SpaceEnv, space)])


# -- spaces are learnt in a worker process, never by building env 0 here -----------------------
def _builds_slowly(index: int) -> gym.Env:
    """Env 0's constructor hangs (well past any start_timeout the tests give)."""
    import time

    from rlblocks.testing.env_checks import ProbeEnv

    if index == 0:
        time.sleep(30)
    return ProbeEnv(index)


def test_a_constructor_that_hangs_is_stopped_after_start_timeout_naming_env_0() -> None:
    import time

    from rlblocks.contracts import EnvWorkerError

    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match=(
        r"env 0 in .* did not start and build its envs within start_timeout=1.0s")) as err:
        ShmemVectorEnv(
            [functools.partial(_builds_slowly, i) for i in range(2)],
            num_workers=1, start_timeout=1.0, worker_timeout=1.0,
        )
    assert time.monotonic() - start < 10, "building env 0 must not block the calling process"
    assert "restart_failed" not in str(err.value), "restarts do not apply to building"


class _OneInstance(gym.Env):
    """An env that refuses to step once closed (as an env whose close() frees its simulator)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(3)

    def __init__(self) -> None:
        self.closed = False
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        if self.closed:
            raise RuntimeError("stepped after close()")
        self.t += 1
        return np.full(1, float(self.t)), 0.0, False, False, {}

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_factory_handing_out_one_instance_gets_it_unclosed_in_the_worker(context: str) -> None:
    made = _OneInstance()
    with ShmemVectorEnv([lambda: made], context=context) as envs:
        assert not made.closed, "building the spaces closed the caller's env"
        envs.reset()
        obs, *_ = envs.step(np.zeros(1, dtype=np.int64))
        assert obs.tolist() == [[1.0]]


# -- actions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("local_envs", [0, 1])
def test_discrete_actions_shaped_n_by_1_are_taken_like_a_flat_vector(local_envs: int) -> None:
    from rlblocks.testing.env_checks import probe_env_fns

    with ShmemVectorEnv(probe_env_fns(3), num_workers=1, local_envs=local_envs) as envs:
        envs.reset()
        obs, *_ = envs.step(np.array([[4], [5], [6]]))
        assert obs[:, 3].tolist() == [4, 5, 6], "each env got its own action"
        obs, *_ = envs.step(np.array([[2], [1]]), [2, 0])
        assert obs[:, 3].tolist() == [2, 1]
        envs.reset()  # env 0's episodes last two steps
        envs.step_async(np.array([[3], [3], [3]]))
        _, obs, *_ = envs.step_wait()
        assert sorted(obs[:, 3].tolist()) == [3, 3, 3]
        with pytest.raises(ValueError, match=r"actions of shape \(3, 2\) .* expected shape \(3,\)"):
            envs.step(np.zeros((3, 2), dtype=np.int64))


def test_the_backend_says_which_observation_spaces_it_cannot_carry() -> None:
    assert ShmemVectorEnv.observation_space_problem(NESTED) is None
    problem = ShmemVectorEnv.observation_space_problem(
        gym.spaces.Dict({"text": gym.spaces.Text(5), "pos": gym.spaces.Box(-1, 1, (2,))})
    )
    assert problem is not None and "Text" in problem and "backend='subproc'" in problem
