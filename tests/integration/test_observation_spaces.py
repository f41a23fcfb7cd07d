"""Every observation space reaches the networks: nested Dict and Tuple observations train PPO
and DQN from scratch, and image observations build a CNN policy that trains, checkpoints and
resumes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.algo.nets import ImageEncoder

NESTED_ID = "rlblocks-test/NestedCartPole-v0"
PIXELS_ID = "rlblocks-test/Pixels-v0"


class NestedCartPole(gym.ObservationWrapper):
    """CartPole with its four numbers spread over a nested Dict and a Tuple, plus a constant
    Discrete entry with a non-zero ``start``: solvable only if every leaf reaches the network."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        inf = np.float32(np.inf)
        self.observation_space = gym.spaces.Dict(
            {
                "cart": gym.spaces.Dict({"x": gym.spaces.Box(-inf, inf, (2,), np.float32)}),
                "pole": gym.spaces.Tuple(
                    (
                        gym.spaces.Box(-inf, inf, (1,), np.float32),
                        gym.spaces.Box(-inf, inf, (1,), np.float32),
                        gym.spaces.Discrete(2, start=3),
                    )
                ),
            }
        )

    def observation(self, obs: np.ndarray) -> dict:
        return {"cart": {"x": obs[:2]}, "pole": (obs[2:3], obs[3:4], np.int64(4))}


class PixelEnv(gym.Env):
    """A 40x40 grey image with a bright square on the left or right; the action that names the
    side earns 1. Episodes last 20 steps."""

    observation_space = gym.spaces.Box(0, 255, (40, 40), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def _draw(self) -> np.ndarray:
        self._side = int(self.np_random.integers(2))
        img = np.zeros((40, 40), np.uint8)
        img[15:25, 5 + 25 * self._side : 15 + 25 * self._side] = 255
        return img

    def step(self, action):
        rew = float(int(action) == self._side)
        self._t += 1
        return self._draw(), rew, False, self._t >= 20, {}


class DictPositions(gym.ObservationWrapper):
    """CartPole's positions only, as ``{"x": [x], "angle": [theta]}``: its velocities are in
    no single observation, only in a stack of them."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(gym.make("CartPole-v1", render_mode=render_mode))
        inf = np.float32(np.inf)
        self.observation_space = gym.spaces.Dict(
            {
                "x": gym.spaces.Box(-inf, inf, (1,), np.float32),
                "angle": gym.spaces.Box(-inf, inf, (1,), np.float32),
            }
        )

    def observation(self, obs: np.ndarray) -> dict:
        return {"x": obs[0:1], "angle": obs[2:3]}


DICT_POSITIONS_ID = "rlblocks-test/DictPositions-v0"
if DICT_POSITIONS_ID not in gym.registry:
    gym.register(DICT_POSITIONS_ID, entry_point=DictPositions)
if NESTED_ID not in gym.registry:
    gym.register(NESTED_ID, entry_point=NestedCartPole, reward_threshold=475.0)
if PIXELS_ID not in gym.registry:
    gym.register(PIXELS_ID, entry_point=PixelEnv)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_nested_dict_and_tuple_observations_reach_the_policy(algo: str) -> None:
    envs = rlblocks.make_vector_env("dummy", NESTED_ID, num_envs=2, seed=0)
    policy = rlblocks.make_policy(algo, envs.observation_space, envs.action_space)
    buffer = rlblocks.make_buffer("replay", size=512, num_envs=2)
    rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=200)
    stored = buffer[buffer.sample_indices(0)[:3]].obs
    assert stored.pole["2"].tolist() == [4, 4, 4]  # the Tuple entry, stored under "2"
    if algo == "dqn":
        stats = policy.update(32, buffer)
    else:
        stats = policy.update(0, buffer, batch_size=64, repeat=1)
    assert all(np.isfinite(float(v)) for v in stats.values())
    envs.close()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_nested_observations_train_to_the_threshold(algo: str, tmp_path: Path) -> None:
    result = rlblocks.train(
        algo, env=NESTED_ID, seed=0, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved, result
    assert result.best_test_return >= 475.0


@pytest.mark.slow
def test_image_observations_get_a_cnn_that_learns_and_resumes(tmp_path: Path) -> None:
    envs = rlblocks.make_vector_env("dummy", PIXELS_ID, num_envs=1)
    policy = rlblocks.make_policy("dqn", envs.observation_space, envs.action_space)
    assert isinstance(policy.model.encoder.parts[0].image, ImageEncoder)
    envs.close()
    run = tmp_path / "run"
    small = [
        "env.num_envs=2",
        "env.num_test_envs=2",
        "trainer.max_env_steps=2000",
        "trainer.warmup_steps=200",
        "trainer.test_interval=1000",
        "trainer.test_episodes=4",
        "trainer.checkpoint_interval=1000",
        "trainer.update_per_step=0.5",
        "trainer.batch_size=32",
        "algo.eps_decay_steps=1000",
        "algo.n_step=1",
        "algo.gamma=0.0",
    ]
    first = rlblocks.train(
        "dqn", env=PIXELS_ID, seed=0, overrides=small, stop_reward=100.0, loggers=[],
        progress=False, run_dir=run,
    )  # fmt: skip
    # picking the bright side from pixels: far above the 10 a random policy scores
    assert first.best_test_return >= 19.0, first
    assert first.env_steps >= 2000
    second = rlblocks.resume(run, overrides=["trainer.max_env_steps=3000"])
    assert second.env_steps >= 3000 and second.best_test_return >= 19.0


def test_ppo_builds_a_cnn_for_images_and_learns_through_it() -> None:
    envs = rlblocks.make_vector_env("dummy", PIXELS_ID, num_envs=2, seed=0)
    policy = rlblocks.make_policy("ppo", envs.observation_space, envs.action_space)
    assert isinstance(policy.encoder.parts[0].image, ImageEncoder)
    buffer = rlblocks.make_buffer("replay", size=256, num_envs=2)
    rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=64)
    conv = policy.encoder.parts[0].image.conv[0].weight.detach().clone()
    policy.update(0, buffer, batch_size=32, repeat=1)
    assert not np.allclose(conv.numpy(), policy.encoder.parts[0].image.conv[0].weight.detach())
    flat = rlblocks.make_policy("ppo", envs.observation_space, envs.action_space, images="flatten")
    assert flat.encoder.out_dim == 40 * 40 and not flat.encoder.learnable
    with pytest.raises(rlblocks.ConfigError, match="images='flatten'"):
        rlblocks.make_policy("ppo", envs.observation_space, envs.action_space, obs_norm=True)
    envs.close()


def test_a_run_stacks_the_frames_of_a_dict_observation_and_its_agent_acts_on_stacks(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    small = ["buffer.stack_num=3", "env.num_envs=2", "env.num_test_envs=2",
             "trainer.max_env_steps=600", "trainer.warmup_steps=100", "trainer.test_interval=300",
             "trainer.test_episodes=2", "trainer.checkpoint_interval=300"]  # fmt: skip
    result = rlblocks.train(
        "dqn", env=DICT_POSITIONS_ID, seed=0, overrides=small, loggers=[], progress=False,
        run_dir=run,
    )  # fmt: skip
    assert result.env_steps >= 600 and result.gradient_steps > 0
    agent = rlblocks.load(run)
    # the policy acts on three frames of each key
    assert agent.policy.observation_space["x"].shape == (3, 1)
    evaluated = agent.evaluate(episodes=2, seed=5)
    assert len(evaluated.returns) == 2 and min(evaluated.lengths) >= 1
    one = {"x": np.zeros((3, 1), np.float32), "angle": np.zeros((3, 1), np.float32)}
    assert agent.act(one) in (0, 1)
    if importlib.util.find_spec("imageio") is not None:  # the video path keeps its own stack
        video = agent.record(tmp_path / "play.gif", episodes=1, max_frames=10)
        assert (tmp_path / "play.gif").stat().st_size > 0 and len(video.returns) == 1
