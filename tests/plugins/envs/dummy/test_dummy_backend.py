"""The dummy (in-process) backend: conformance kit plus behaviour specific to it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.errors import EnvWorkerError
from rlblocks.testing.env_checks import check_vector_env
from rlblocks_env_dummy.dummy import DummyVectorEnv


def test_dummy_backend_passes_conformance_kit() -> None:
    check_vector_env(DummyVectorEnv)


def test_the_kit_catches_a_backend_whose_restore_forgets_the_envs() -> None:
    import pytest

    class Forgetful(DummyVectorEnv):
        def restore(self, snapshots, env_ids=None) -> None:
            self._waiting.clear()  # claims the episodes continue, restores nothing

    with pytest.raises(AssertionError, match="restored twin"):
        check_vector_env(Forgetful)


class _AsyncDummy(DummyVectorEnv):
    """The smallest async backend: ``step_async`` steps at once, ``step_wait`` hands back the
    results in ready order (here: the reverse of the order sent, to show ids travel with rows)."""

    def __init__(self, env_fns, **kwargs) -> None:
        super().__init__(env_fns, **kwargs)
        self._ready: list[tuple[np.ndarray, tuple]] = []

    def step_async(self, actions, env_ids=None) -> None:
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids)
        self._ready.append((ids, self.step(actions, ids)))

    def step_wait(self, wait_num=None, timeout=None):
        ids, (obs, rew, terminated, truncated, infos) = self._ready.pop(0)
        back = np.arange(len(ids))[::-1]
        return (
            self._label(ids[back]),
            obs[back],
            rew[back],
            terminated[back],
            truncated[back],
            [infos[k] for k in back],
        )

    def _label(self, ids: np.ndarray) -> np.ndarray:
        return ids


def test_an_async_backend_passes_the_kit_whatever_order_envs_finish_in() -> None:
    check_vector_env(_AsyncDummy)


def test_the_kit_catches_step_wait_rows_labelled_with_the_wrong_envs() -> None:
    class Mislabelled(_AsyncDummy):
        def _label(self, ids: np.ndarray) -> np.ndarray:
            return ids[::-1]

    with pytest.raises(AssertionError, match="env_ids order"):
        check_vector_env(Mislabelled)


def test_the_kit_catches_set_attr_that_ignores_env_ids() -> None:
    class Everywhere(DummyVectorEnv):
        def set_attr(self, name, value, env_ids=None) -> None:
            super().set_attr(name, value)

    with pytest.raises(AssertionError, match="should change env 1 only"):
        check_vector_env(Everywhere)


def test_the_kit_catches_render_in_the_wrong_order() -> None:
    class Sorted(DummyVectorEnv):
        def render(self, env_ids=None):
            return super().render(sorted(env_ids))

    with pytest.raises(AssertionError, match=r"render\(\[3, 0\]\)"):
        check_vector_env(Sorted)


def test_the_kit_catches_an_env_error_that_is_not_reported_as_env_worker_error() -> None:
    class Raw(DummyVectorEnv):
        def step(self, actions, env_ids=None):
            try:
                return super().step(actions, env_ids)
            except EnvWorkerError as err:
                raise err.__cause__ from None

    with pytest.raises(AssertionError, match="got ProbeEnvFailure"):
        check_vector_env(Raw)


def test_make_vector_env_by_name_steps_cartpole() -> None:
    envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=3, seed=0)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, 4)
    obs2, rew, term, _trunc, infos = envs.step(np.array([0, 1, 0]))
    assert obs2.shape == (3, 4) and rew.shape == (3,) and term.dtype == bool
    assert len(infos) == 3
    envs.close()


def test_same_seed_gives_same_trajectories() -> None:
    def rollout() -> np.ndarray:
        envs = rlblocks.make_vector_env("dummy", "CartPole-v1", num_envs=2)
        obs, _ = envs.reset(seed=42)
        out = [obs]
        for t in range(20):
            obs, _, term, trunc, _ = envs.step(np.array([t % 2, (t + 1) % 2]))
            out.append(obs)
            if (term | trunc).any():
                break
        envs.close()
        return np.stack(out)

    a, b = rollout(), rollout()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[:, 0], a[:, 1]), "two envs seeded alike: seeds must differ per env"


def test_env_error_names_env_id() -> None:
    class Exploding(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, dtype=np.float32), {}

        def step(self, action):
            raise RuntimeError("boom")

    envs = DummyVectorEnv([Exploding, Exploding])
    envs.reset()
    with pytest.raises(EnvWorkerError, match=r"env 0 raised in step: RuntimeError\('boom'\)"):
        envs.step(np.array([0, 1]))


def test_dict_observations_are_stacked_per_key() -> None:
    class DictEnv(gym.Env):
        observation_space = gym.spaces.Dict(
            {"pos": gym.spaces.Box(-1, 1, (2,)), "id": gym.spaces.Discrete(5)}
        )
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return {"pos": np.ones(2, dtype=np.float32), "id": 3}, {}

        def step(self, action):
            return {"pos": np.full(2, action, dtype=np.float32), "id": 1}, 1.0, False, False, {}

    envs = DummyVectorEnv([DictEnv, DictEnv, DictEnv])
    obs, _ = envs.reset()
    assert obs["pos"].shape == (3, 2) and obs["id"].tolist() == [3, 3, 3]
    obs, *_ = envs.step(np.array([0, 1, 0]), env_ids=None)
    assert obs["pos"][:, 0].tolist() == [0.0, 1.0, 0.0]


def test_observations_of_the_wrong_shape_are_named_not_stacked_silently() -> None:
    class Misshaped(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(3, dtype=np.float32), {}  # the space says (2,)

        def step(self, action):
            return np.zeros(3, dtype=np.float32), 0.0, False, False, {}

    envs = DummyVectorEnv([Misshaped, Misshaped])
    with pytest.raises(EnvWorkerError, match=r"shape \(3,\), but its observation space says"):
        envs.reset()


def test_a_finished_env_must_be_reset_before_it_steps_again() -> None:
    class Short(gym.Env):
        """Episodes of 2 steps on env 0, endless on the others."""

        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Discrete(2)

        def __init__(self, length: int) -> None:
            self.length, self.t = length, 0

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros(1, dtype=np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(1, dtype=np.float32), 1.0, self.t >= self.length, False, {}

    envs = DummyVectorEnv([lambda: Short(2), lambda: Short(10**9), lambda: Short(10**9)])
    with pytest.raises(EnvWorkerError, match=r"envs \[0, 1, 2\] finished their episode or were"):
        envs.step(np.zeros(3, dtype=np.int64))  # never reset
    envs.reset(env_ids=[1, 2])
    envs.step(np.zeros(2, dtype=np.int64), env_ids=[1, 2])  # the reset ones may step
    with pytest.raises(EnvWorkerError, match=r"envs \[0\] finished"):
        envs.step(np.zeros(2, dtype=np.int64), env_ids=[2, 0])
    envs.reset(env_ids=np.array([0]))
    _, _, term, _, _ = envs.step(np.zeros(3, dtype=np.int64))
    _, _, term, _, _ = envs.step(np.zeros(3, dtype=np.int64))
    assert term.tolist() == [True, False, False]
    with pytest.raises(EnvWorkerError, match=r"envs \[0\] finished"):
        envs.step(np.zeros(3, dtype=np.int64))
    envs.step(np.zeros(2, dtype=np.int64), env_ids=[1, 2])  # the others go on
    envs.reset(env_ids=[0])
    envs.step(np.zeros(3, dtype=np.int64))
