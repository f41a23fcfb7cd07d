"""Env snapshots: a fresh env restored from a snapshot steps bit for bit like the original; envs
with layers rlblocks does not know say which layer; snapshots are plain values a checkpoint may
hold."""

from __future__ import annotations

import io
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlblocks.collect import env_state as env_state
from rlblocks.run._checkpoint import from_plain, to_plain

CLASSIC = ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
           "Acrobot-v1", "FrozenLake-v1", "CliffWalking-v1", "Blackjack-v1"]  # fmt: skip
MUJOCO = ["Hopper-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5", "Walker2d-v5", "Swimmer-v5",
          "Reacher-v5", "Pusher-v5", "InvertedDoublePendulum-v5"]  # fmt: skip


def _rollout(env: gym.Env, actions: list[Any]) -> list[tuple]:
    """Every step's (obs bytes, reward, terminated, truncated), resets included."""
    out: list[tuple] = []
    for a in actions:
        obs, rew, term, trunc, _ = env.step(a)
        out.append((np.asarray(obs).tobytes(), float(rew), bool(term), bool(trunc)))
        if term or trunc:
            out.append((np.asarray(env.reset()[0]).tobytes(),))
    return out


def _through_checkpoint(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot after a trip through torch.save / torch.load(weights_only=True)."""
    fh = io.BytesIO()
    torch.save(to_plain(snap), fh)
    fh.seek(0)
    return from_plain(torch.load(fh, weights_only=True))


def _check_twin(env_id: str) -> None:
    env = gym.make(env_id)
    assert env_state.why_not(env) == ""
    env.reset(seed=1)
    env.action_space.seed(2)
    actions = [env.action_space.sample() for _ in range(160)]
    _rollout(env, actions[:37])  # somewhere mid-episode
    snap = _through_checkpoint(env_state.snapshot(env))
    expected = _rollout(env, actions[37:])
    twin = gym.make(env_id)
    env_state.restore(twin, snap)
    assert _rollout(twin, actions[37:]) == expected
    # the comparison can fail: a twin reset with another seed goes elsewhere
    other = gym.make(env_id)
    other.reset(seed=99)
    _rollout(other, actions[:5])
    assert _rollout(other, actions[37:]) != expected
    env.close(), twin.close(), other.close()


@pytest.mark.parametrize("env_id", CLASSIC)
def test_a_restored_classic_env_steps_exactly_like_the_original(env_id: str) -> None:
    _check_twin(env_id)


@pytest.mark.parametrize("env_id", MUJOCO)
def test_a_restored_mujoco_env_steps_exactly_like_the_original(env_id: str) -> None:
    pytest.importorskip("mujoco")
    _check_twin(env_id)


class _Counting(gym.Wrapper):
    """A wrapper with state rlblocks does not know."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.count = 0

    def step(self, action: Any) -> Any:
        self.count += 1
        return self.env.step(action)


class _Snapshotting(_Counting):
    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])


def test_an_unknown_stateful_layer_is_named_and_the_protocol_makes_it_snapshottable() -> None:
    env = _Counting(gym.make("CartPole-v1"))
    reason = env_state.why_not(env)
    assert "_Counting" in reason and "snapshot_state" in reason
    assert env_state.snapshot(env) is None
    assert env_state.snapshot_or_reason(env) == {"env": None, "why": reason}
    env = _Snapshotting(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(5):
        env.step(0)
    twin = _Snapshotting(gym.make("CartPole-v1"))
    env_state.restore(twin, env_state.snapshot(env))
    assert twin.count == 5
    assert np.array_equal(twin.unwrapped.state, env.unwrapped.state)


class _Refusing(_Counting):
    """Snapshottable until it holds something that is not plain values."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.handle: object = None

    def snapshot_state(self) -> dict[str, Any]:
        if self.handle is not None:
            return {"why": "it holds an open handle"}
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])


def test_a_protocol_layer_refuses_with_a_reason_that_names_it() -> None:
    env = _Refusing(gym.make("CartPole-v1"))
    env.reset(seed=0)
    assert env_state.snapshot_or_reason(env)["why"] == ""
    env.handle = object()
    assert env_state.why_not(env) == ""  # the layer's kind is known: it refuses when asked
    assert env_state.snapshot(env) is None
    entry = env_state.snapshot_or_reason(env)
    assert entry["env"] is None
    assert "_Refusing" in entry["why"] and "it holds an open handle" in entry["why"]


def test_a_snapshot_of_another_env_is_refused() -> None:
    snap = env_state.snapshot(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="layers"):
        env_state.restore(gym.make("Pendulum-v1"), snap)
    snap["layers"][-1]["rng"] = {"state": {"bit_generator": "os.system"}, "seed": None}
    with pytest.raises(ValueError, match="random generator"):
        env_state.restore(gym.make("CartPole-v1"), snap)


def test_checkpoint_arrays_keep_dtype_and_shape_and_refuse_objects() -> None:
    tree = {"a": np.arange(6, dtype=np.int16).reshape(2, 3), "b": [np.float32(1.5), (np.ones(2),)]}
    back = from_plain(to_plain(tree))
    assert back["a"].dtype == np.int16 and back["a"].shape == (2, 3)
    assert np.array_equal(back["a"], tree["a"]) and back["b"][0] == 1.5
    assert isinstance(back["b"][1], tuple) and back["b"][1][0].flags.writeable
    with pytest.raises(TypeError, match="dtype"):
        to_plain(np.array([object()]))


@pytest.mark.parametrize("steps_before", [0, 1])
def test_an_env_restored_before_its_second_step_steps_and_resets(steps_before: int) -> None:
    """gymnasium's env checker compares its first reset and steps by object identity and keeps
    them for that: an env snapshotted between its first reset and its second step (a test env
    that a short test never reached) must still step after a restore, and reset."""
    env = gym.make("Pendulum-v1")
    env.reset(seed=1)
    actions = [np.array([0.5 - 0.1 * k], dtype=np.float32) for k in range(6)]
    _rollout(env, actions[:steps_before])
    snap = _through_checkpoint(env_state.snapshot(env))
    expected = _rollout(env, actions[steps_before:])
    twin = gym.make("Pendulum-v1")
    env_state.restore(twin, snap)
    assert _rollout(twin, actions[steps_before:]) == expected
    other = gym.make("Pendulum-v1")
    env_state.restore(other, snap)  # a collector that starts the restored env afresh
    first = np.asarray(other.reset(seed=5)[0]).tobytes()
    assert first == np.asarray(env.reset(seed=5)[0]).tobytes()
    assert _rollout(other, actions) == _rollout(env, actions)
    env.close(), twin.close(), other.close()
