"""OnPolicyTrainer: learn over each whole collect, clear the buffer, let episodes span collects."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.algo import BasePolicy
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError
from rlblocks.replay import ReplayBuffer
from rlblocks.trainers import OnPolicyTrainer


class FixedLengthEnv(gym.Env):
    """Every episode lasts exactly ``length`` steps (then terminates); reward 1 per step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 10) -> None:
        self.length = length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


class RecordingPolicy(BasePolicy):
    """Acts with zeros and records what every update sees."""

    def __init__(self) -> None:
        super().__init__(FixedLengthEnv.observation_space, FixedLengthEnv.action_space)
        self.seen: list[dict[str, Any]] = []

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        return Batch(act=np.zeros(len(batch.obs), dtype=np.int64), state=state)

    def update(self, sample_size: int, buffer: Any, **kwargs: Any) -> dict[str, float]:
        _batch, idx = buffer.sample(sample_size)
        self.seen.append({"n": len(idx), "sample_size": sample_size, **kwargs})
        return {"gradient_steps": 3, "loss": 1.0}


def make_trainer(num_envs: int = 2, **kwargs: Any) -> tuple[OnPolicyTrainer, RecordingPolicy]:
    policy = RecordingPolicy()
    envs = rlblocks.make_vector_env("dummy", [FixedLengthEnv] * num_envs, seed=0)
    buffer = ReplayBuffer(kwargs.pop("buffer_size", 64), num_envs=num_envs)
    collector = Collector(policy, envs, buffer, seed=0)
    options = {"max_env_steps": 40, "test_interval": 1000, "batch_size": 16, **kwargs}
    return OnPolicyTrainer(policy, collector, None, buffer, **options), policy


def test_every_collect_is_learned_once_in_full_then_the_buffer_is_cleared() -> None:
    trainer, policy = make_trainer(step_per_collect=8, repeat_per_collect=4)
    result = trainer.run()
    assert result.env_steps == 40
    assert [s["n"] for s in policy.seen] == [8] * 5
    assert all(s["sample_size"] == 0 and s["repeat"] == 4 for s in policy.seen)
    assert all(s["batch_size"] == 16 for s in policy.seen)
    assert result.gradient_steps == 5 * 3
    assert len(trainer.buffer) == 0


def test_episodes_continue_across_collects() -> None:
    lengths: list[np.ndarray] = []

    trainer, _ = make_trainer(num_envs=1, step_per_collect=3, max_env_steps=30)
    original = trainer._record_collect

    def record(stats: Any) -> None:
        lengths.append(stats.lengths)
        original(stats)

    trainer._record_collect = record  # type: ignore[method-assign]
    trainer.run()
    # collects of 3 steps never cut the 10-step episodes short
    assert np.concatenate(lengths).tolist() == [10, 10, 10]


def test_episode_mode_collects_whole_episodes() -> None:
    trainer, policy = make_trainer(episode_per_collect=3, step_per_collect=None, max_env_steps=60)
    trainer.run()
    assert [s["n"] for s in policy.seen] == [30, 30]


def test_a_buffer_smaller_than_one_collect_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"buffer\.size"):
        make_trainer(step_per_collect=100, buffer_size=50)


def test_on_policy_result_times_collects_and_updates_and_calls_train_fn() -> None:
    import time

    calls: list[tuple[int, int]] = []
    trainer, policy = make_trainer(step_per_collect=8, train_fn=lambda e, s: calls.append((e, s)))
    update = policy.update

    def slow_update(*args: Any, **kwargs: Any) -> dict[str, float]:
        time.sleep(0.01)
        return update(*args, **kwargs)

    policy.update = slow_update  # type: ignore[method-assign]
    result = trainer.run()
    assert calls == [(1, step) for step in range(0, 40, 8)]
    assert result.update_seconds >= 0.01 * 5 and result.collect_seconds > 0
    assert result.update_speed == pytest.approx(15 / result.update_seconds)
    assert result.test_seconds == result.test_speed == 0.0  # no test collector
