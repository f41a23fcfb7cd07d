"""The dummy (in-process) backend: conformance kit plus behaviour specific to it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import EnvWorkerError
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


# -- parity with the process backends -------------------------------------------------------
def _process_backend(fns):
    from rlblocks_env_subproc.subproc import SubprocVectorEnv

    return SubprocVectorEnv(fns, num_workers=1)


_AFTER_CLOSE = {
    "step": lambda envs: envs.step(np.zeros(2, dtype=np.int64)),
    "step some": lambda envs: envs.step(np.zeros(1, dtype=np.int64), [1]),
    "reset": lambda envs: envs.reset(),
    "render": lambda envs: envs.render(),
    "get_attr": lambda envs: envs.get_attr("index"),
    "set_attr": lambda envs: envs.set_attr("tag", 1.0),
    "snapshot": lambda envs: envs.snapshot(),
}


@pytest.mark.parametrize("call", _AFTER_CLOSE)
@pytest.mark.parametrize("make", [DummyVectorEnv, _process_backend], ids=["dummy", "subproc"])
def test_every_use_after_close_is_the_same_error_on_every_backend(make, call: str) -> None:
    from rlblocks.testing.env_checks import probe_env_fns

    envs = make(probe_env_fns(2))
    envs.reset(seed=0)
    envs.close()
    with pytest.raises(EnvWorkerError, match=r"this vector env is closed; build a new one"):
        _AFTER_CLOSE[call](envs)
    envs.close()  # a second close stays harmless


@pytest.mark.parametrize("make", [DummyVectorEnv, _process_backend], ids=["dummy", "subproc"])
def test_render_mode_metadata_and_spec_are_those_of_env_0(make) -> None:
    from rlblocks.testing.env_checks import ProbeEnv, probe_env_fns

    with make(probe_env_fns(2)) as envs:
        assert envs.render_mode == "rgb_array" == ProbeEnv.render_mode
        assert envs.metadata == ProbeEnv.metadata
        assert envs.spec is None
    with make([lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * 2) as envs:
        assert envs.render_mode == "rgb_array" and envs.spec.id == "CartPole-v1"


@pytest.mark.parametrize("make", [DummyVectorEnv, _process_backend], ids=["dummy", "subproc"])
def test_a_missing_attribute_is_an_env_worker_error_naming_the_env(make) -> None:
    from rlblocks.testing.env_checks import probe_env_fns

    with make(probe_env_fns(3)) as envs:
        with pytest.raises(EnvWorkerError, match=r"env 2 raised in get_attr: AttributeError"):
            envs.get_attr("no_such_thing", [2, 0])
        assert envs.get_attr("index", [2, 0]) == [2, 0], "the envs serve on"


class _StepFails(gym.Env):
    """Env 1 raises on its second step; the others step on."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int) -> None:
        self.index, self.t = index, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1), {}

    def step(self, action):
        self.t += 1
        if self.index == 1 and self.t == 2:
            raise RuntimeError("env 1 broke")
        return np.full(1, float(self.t)), 0.0, False, False, {}


@pytest.mark.parametrize("make", [DummyVectorEnv, _process_backend], ids=["dummy", "subproc"])
def test_after_an_env_raised_in_step_every_env_of_that_step_must_be_reset(make) -> None:
    import functools

    with make([functools.partial(_StepFails, i) for i in range(3)]) as envs:
        envs.reset()
        envs.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(EnvWorkerError, match="env 1 raised in step"):
            envs.step(np.zeros(3, dtype=np.int64))
        for ids in ([0], [1], [2]):  # 0 stepped unseen, 1 broke, 2 is part of the same step
            with pytest.raises(EnvWorkerError, match=rf"envs \[{ids[0]}\] finished"):
                envs.step(np.zeros(1, dtype=np.int64), ids)
        envs.reset()
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64))
        assert obs[:, 0].tolist() == [1.0, 1.0, 1.0]


class _BadLeaf(gym.Env):
    """A Dict observation whose ``["parts"][1]`` leaf has shape (3,) on env 1 (its space: (2,))."""

    observation_space = gym.spaces.Dict({
        "id": gym.spaces.Discrete(4),
        "parts": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,)))),
    })
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int) -> None:
        self.index = index

    def _obs(self):
        size = 3 if self.index == 1 else 2
        return {"id": self.index, "parts": (0, np.zeros(size, dtype=np.float32))}

    def reset(self, *, seed=None, options=None):
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def test_a_nested_observation_leaf_of_the_wrong_shape_is_named_with_both_shapes() -> None:
    import functools

    envs = DummyVectorEnv([functools.partial(_BadLeaf, i) for i in range(3)])
    with pytest.raises(EnvWorkerError, match=(
        r"env 1 returned an observation\['parts'\]\[1\] of shape \(3,\), but its observation "
        r"space says \(2,\); fix the env or a wrapper")):
        envs.reset()
    envs.reset([0, 2])  # the well-shaped envs still reset and step
    obs, *_ = envs.step(np.zeros(2, dtype=np.int64), [2, 0])
    assert obs["id"].tolist() == [2, 0] and obs["parts"][1].shape == (2, 2)


class _TextEnv(gym.Env):
    """Text observations ``"r<index>"`` at reset and ``"s<index>x<t>"`` after each step."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int) -> None:
        self.index, self.t = index, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return f"r{self.index}", {}

    def step(self, action):
        self.t += 1
        return f"s{self.index}x{self.t}", 1.0, self.t >= 3, False, {}


def test_text_observations_come_back_as_object_arrays_that_rows_can_be_taken_from() -> None:
    import functools

    from rlblocks.contracts import put_rows, take_rows

    envs = DummyVectorEnv([functools.partial(_TextEnv, i) for i in range(3)])
    obs, _ = envs.reset()
    assert isinstance(obs, np.ndarray) and obs.dtype == object and obs.tolist() == [
        "r0", "r1", "r2"]
    obs, *_ = envs.step(np.zeros(2, dtype=np.int64), [2, 0])
    assert obs.tolist() == ["s2x1", "s0x1"]
    # what the collector does with a subset of rows
    assert take_rows(obs, np.array([1])).tolist() == ["s0x1"]
    put_rows(obs, np.array([0]), envs.reset([1])[0])
    assert obs.tolist() == ["r1", "s0x1"]
