"""Atari as users run it: ALE ids through gymnasium's preprocessing, frames stored once and stacked
by the buffer, acting stacks equal to training stacks, the papers' presets, and a short Rainbow
run that checkpoints and resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.collect import env_state as env_state
from rlblocks.contracts import (
    Batch,
    ConfigError,
    ViewRequirement,
    frame_stack_views,
    training_views,
)
from rlblocks.plugins import hookimpl
from rlblocks.replay import ReplayBuffer
from rlblocks.run import _config as cfg
from rlblocks.run import atari100k_config, make_atari, make_vector_env, spec_lookup

FRAME = 84 * 84  # bytes of one stored uint8 frame

# short games keep the tests quick: ALE ends an episode after this many frames
SHORT = "env.make_kwargs.max_num_frames_per_episode=2000"


def _layers(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_the_pipeline_gives_84x84_uint8_frames_and_keeps_clipping_out_of_test_envs() -> None:
    train = make_atari("ALE/Breakout-v5", train=True, episodic_life=True)
    test = make_atari("ALE/Breakout-v5", train=False, episodic_life=True)
    obs, _ = train.reset(seed=0)
    assert obs.shape == (84, 84) and obs.dtype == np.uint8
    assert train.observation_space == gym.spaces.Box(0, 255, (84, 84), np.uint8)
    assert {"ClipReward", "EpisodicLife", "AtariPreprocessing"} <= set(_layers(train))
    assert "ClipReward" not in _layers(test) and "EpisodicLife" not in _layers(test)
    # v5's own sticky actions unless the protocol says otherwise
    assert train.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    no_sticky = make_atari("ALE/Breakout-v5", train=True, sticky=0.0)
    assert no_sticky.unwrapped.ale.getFloat("repeat_action_probability") == 0.0


def test_episodic_life_ends_the_learning_episode_but_not_the_game() -> None:
    env = make_atari("ALE/Breakout-v5", train=True, episodic_life=True, sticky=0.0)
    env.reset(seed=1)
    ale = env.unwrapped.ale
    lives = ale.lives()
    assert lives > 1
    rng = np.random.default_rng(0)
    for _ in range(5000):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            break
    assert terminated and ale.lives() == lives - 1 and not ale.game_over()
    frame = ale.getEpisodeFrameNumber()
    env.reset()  # no seed: the game goes on
    assert ale.getEpisodeFrameNumber() == frame and ale.lives() == lives - 1
    env.reset(seed=2)  # a seed starts a new game
    assert ale.lives() == lives


def test_atari_envs_snapshot_and_restore_exactly_with_sticky_actions() -> None:
    def make() -> gym.Env:
        return make_atari("ALE/Breakout-v5", train=True, episodic_life=True)

    a = make()
    a.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(60):
        a.step(int(rng.integers(4)))
    assert env_state.why_not(a) == ""
    b = make()
    b.reset(seed=42)
    env_state.restore(b, env_state.snapshot(a))
    for _ in range(300):
        action = int(rng.integers(4))
        oa, ob = a.step(action), b.step(action)
        assert np.array_equal(oa[0], ob[0]) and oa[1:4] == ob[1:4]
        if oa[2] or oa[3]:
            assert np.array_equal(a.reset()[0], b.reset()[0])


class _Recorder(torch.nn.Module):
    """A policy that acts at random and remembers every observation it was handed."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.seen = n, []
        self.rng = np.random.default_rng(0)

    def forward(self, batch: Batch, state: Any = None) -> Batch:
        self.seen.append(np.array(batch.obs, copy=True))
        return Batch(act=self.rng.integers(self.n, size=len(batch.obs)))

    def exploration_noise(self, act: Any, batch: Any) -> Any:
        return act

    def map_action(self, act: Any) -> Any:
        return act

    def map_action_inverse(self, act: Any) -> Any:
        return act


def test_acting_stacks_are_the_stacks_training_reads_back() -> None:
    # short CartPole episodes: many episode starts, where the first frame is repeated
    envs = make_vector_env("dummy", "CartPole-v1", num_envs=3, seed=0)
    buf = ReplayBuffer(600, num_envs=3, stack_num=4, ignore_obs_next=True)
    policy = _Recorder(2)
    collector = Collector(policy, envs, buf, seed=0, frame_stack=4)
    collector.reset(seed=0)
    collector.collect(n_step=300)
    seen = np.concatenate(policy.seen)  # in the order the steps were written
    order = buf.sample_index(0)
    assert seen.shape == (300, 4, 4)
    stored = buf[order]
    assert stored.obs.shape == (300, 4, 4)
    assert np.array_equal(stored.obs, seen)
    # the next stack of a step that did not end its episode is the next step's stack
    for i, slot in enumerate(order):
        nxt = buf.next(slot)
        if nxt != slot:
            assert np.array_equal(stored.obs_next[i], buf[np.array([nxt])].obs[0])
    # a frame stack declared as a view reads the same values
    req = {"stack": ViewRequirement("obs", shift="-3:0", pad="edge", used_for_acting=False)}
    assert np.array_equal(training_views(buf, order, req)["stack"], seen)
    # only single frames are stored
    assert buf.storage_arrays["obs"].shape[1:] == (4,)


def test_frame_stacking_refuses_a_policy_view_of_its_own_and_bad_pads() -> None:
    with pytest.raises(ConfigError, match="its own 'obs' view"):
        frame_stack_views(4, {"obs": ViewRequirement("obs", shift="-1:0")})
    with pytest.raises(ConfigError, match="'zeros' or 'edge'"):
        ViewRequirement("obs", shift="-1:0", pad="wrap")
    envs = make_vector_env("dummy", "CartPole-v1", num_envs=1, seed=0)
    policy = _Recorder(2)
    policy.view_requirements = {"prev_act": ViewRequirement("act", shift=-1, pad="edge")}
    with pytest.raises(ConfigError, match="for obs views"):
        Collector(policy, envs, None)


def test_every_value_based_algo_has_an_atari_preset() -> None:
    for algo in ("dqn", "c51", "rainbow", "qrdqn", "iqn", "fqf"):
        c = cfg.build_config(algo, flags={"env": {"id": "ALE/Pong-v5"}}, spec_lookup=spec_lookup)
        assert c.buffer.stack_num == 4 and c.buffer.ignore_obs_next, algo
        assert c.env.wrappers[0]["path"] == "gymnasium.wrappers:AtariPreprocessing", algo
        assert c.trainer.batch_size == 32 and c.buffer.size == 1_000_000, algo
        assert c.algo.tau is None and c.algo.target_update_interval == 2_000, algo
    der = cfg.build_config(
        "rainbow",
        file_data=atari100k_config(),
        flags={"env": {"id": "ALE/Pong-v5"}},
        spec_lookup=spec_lookup,
    )
    assert der.algo.n_step == 20 and der.trainer.max_env_steps == 100_000
    assert der.env.make_kwargs["repeat_action_probability"] == 0.0
    assert "rlblocks.run:EpisodicLife" in der.env.train_wrappers


def test_on_policy_runs_refuse_buffer_frame_stacks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="FrameStackObservation"):
        rlblocks.train("ppo", env="CartPole-v1", overrides=["buffer.stack_num=4"], quiet=True,
                       loggers=[], max_env_steps=5000)  # fmt: skip


class _BufferBytes:
    def __init__(self) -> None:
        self.per_slot: float | None = None
        self.obs_shape: tuple[int, ...] = ()

    @hookimpl
    def rlblocks_rollout_end(self, stats: dict, env_step: int, trainer: Any) -> None:
        buf = trainer.buffer
        self.per_slot = buf.nbytes / buf.maxsize
        self.obs_shape = buf.storage_arrays["obs"].shape[1:]


def test_rainbow_on_pong_stores_one_frame_per_transition_and_acts_on_stacks(
    tmp_path: Path,
) -> None:
    probe = _BufferBytes()
    result = rlblocks.train(
        "rainbow", env="ALE/Pong-v5", seed=0, quiet=True, loggers=[], hooks=[probe],
        run_dir=tmp_path / "run",
        overrides=[SHORT, "buffer.size=2000", "trainer.max_env_steps=400",
                   "trainer.warmup_steps=200", "trainer.test_interval=400",
                   "trainer.test_episodes=1", "env.num_test_envs=1"],
    )  # fmt: skip
    assert result.env_steps == 400 and result.gradient_steps > 0
    assert probe.obs_shape == (84, 84)
    # one uint8 frame plus the scalars (action, reward, flags, links, priorities)
    assert FRAME < probe.per_slot <= 1.1 * FRAME
    assert result.agent.policy.observation_space.shape == (4, 84, 84)
    # the test games are scored in raw points (Pong: -21 .. 21), not clipped ones
    assert -21 <= result.last_test_return <= 21


def test_an_agent_loaded_back_plays_on_frame_stacks(tmp_path: Path) -> None:
    rlblocks.train(
        "dqn", env="ALE/Pong-v5", seed=0, quiet=True, loggers=[], run_dir=tmp_path / "run",
        overrides=[SHORT, "buffer.size=500", "trainer.max_env_steps=200",
                   "trainer.warmup_steps=100", "trainer.test_interval=200",
                   "trainer.test_episodes=1", "env.num_test_envs=1"],
    )  # fmt: skip
    agent = rlblocks.load(tmp_path / "run", which="latest")
    assert agent.observation_space.shape == (4, 84, 84)
    result = agent.evaluate(episodes=1, seed=5)
    assert len(result.returns) == 1 and -21 <= result.returns[0] <= 21
    assert result.lengths[0] <= 500  # the run's make kwargs (short games) were kept
    stack = np.zeros((4, 84, 84), dtype=np.uint8)
    assert agent.act(stack) in range(6)


@pytest.mark.parametrize("train", [True, False])
def test_fire_reset_serves_again_after_every_lost_life(train: bool) -> None:
    """Breakout launches the ball only on FIRE: a policy that never presses it (here, NOOP
    only) must still lose every life, in training envs (episodic life outside) and whole-game
    test envs alike, instead of stalling after the first lost life."""
    env = make_atari(
        "ALE/Breakout-v5", train=train, episodic_life=True, sticky=0.0, fire_reset=True
    )
    env.reset(seed=3)
    ale = env.unwrapped.ale
    lives = ale.lives()
    noop = env.unwrapped.get_action_meanings().index("NOOP")
    lost, steps = 0, 0
    while not ale.game_over() and steps < 20_000:
        _, _, terminated, truncated, _ = env.step(noop)
        steps += 1
        if terminated or truncated:
            lost += 1
            if ale.game_over():
                break
            env.reset()  # episodic life: the game goes on
    assert ale.game_over() and ale.lives() == 0
    assert lost == (lives if train else 1)  # training ends an episode at every lost life
    assert steps < 5_000  # each served ball is missed within a few hundred steps
