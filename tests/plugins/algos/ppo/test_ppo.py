"""PPO: the clipped loss, its options, space support, and training to reward thresholds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks.run import build_config, spec_lookup
from rlblocks_algo_ppo.config import PPOConfig
from rlblocks_algo_ppo.ppo import PPOPolicy

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)


def rollout_buffer(
    policy: PPOPolicy, n: int = 64, num_envs: int = 2, seed: int = 0
) -> ReplayBuffer:
    """``n`` steps per env of random observations with the policy's own actions."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n * num_envs, num_envs=num_envs)
    space = policy.observation_space
    for t in range(n):
        obs = np.stack([space.sample() for _ in range(num_envs)])
        if isinstance(space, gym.spaces.Dict):
            obs = {k: np.stack([space.sample()[k] for _ in range(num_envs)]) for k in space}
        act = policy(Batch(obs=obs)).act
        buf.add(
            Batch(
                obs=obs,
                act=act,
                rew=rng.normal(size=num_envs),
                terminated=np.array([t % 17 == 16] * num_envs),
                truncated=np.zeros(num_envs, bool),
                obs_next=obs,
            ),
            env_ids=np.arange(num_envs),
        )
    return buf


@pytest.mark.parametrize(
    "action_space",
    [
        gym.spaces.Discrete(3),
        gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32),
        gym.spaces.MultiDiscrete([3, 4]),
    ],
    ids=["discrete", "box", "multidiscrete"],
)
def test_update_runs_and_changes_the_policy_for_each_action_space(action_space) -> None:
    torch.manual_seed(0)
    policy = PPOPolicy(BOX_OBS, action_space, PPOConfig())
    buf = rollout_buffer(policy)
    before = [p.detach().clone() for p in policy.actor.parameters()]
    stats = policy.update(0, buf, batch_size=32, repeat=2)
    assert stats["gradient_steps"] == 8
    assert all(np.isfinite(v) for v in stats.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.actor.parameters()))


def test_dict_observations_are_flattened_by_the_default_encoder() -> None:
    obs_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (2,), dtype=np.float32), "mode": gym.spaces.Discrete(3)}
    )
    policy = PPOPolicy(obs_space, gym.spaces.Discrete(2), PPOConfig())
    assert policy.encoder.out_dim == 5
    stats = policy.update(0, rollout_buffer(policy, n=16), batch_size=8, repeat=1)
    assert stats["gradient_steps"] == 4


def test_a_user_encoder_is_trained_with_the_loss() -> None:
    class Encoder(torch.nn.Module):
        out_dim = 4

        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.lin(obs)

    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(), encoder=Encoder())
    before = policy.encoder.lin.weight.detach().clone()
    policy.update(0, rollout_buffer(policy, n=16), batch_size=8, repeat=1)
    assert not torch.equal(before, policy.encoder.lin.weight)


def test_box_actions_are_clipped_and_scaled_into_the_space() -> None:
    space = gym.spaces.Box(
        np.array([0.0, -10.0], np.float32), np.array([1.0, 10.0], np.float32), dtype=np.float32
    )
    policy = PPOPolicy(BOX_OBS, space, PPOConfig(log_std_init=2.0))
    act = policy(Batch(obs=np.zeros((500, 3), np.float32))).act
    env_act = policy.map_action(act)
    assert np.all(env_act >= space.low) and np.all(env_act <= space.high)
    assert env_act[:, 0].min() == 0.0 and env_act[:, 0].max() == 1.0  # clipping happened
    tanh = PPOPolicy(BOX_OBS, space, PPOConfig(action_bound_method="tanh"))
    out = tanh.map_action(np.array([[0.0, 0.0]], np.float32))
    np.testing.assert_allclose(out, [[0.5, 0.0]])


def test_kl_early_stop_ends_the_update_before_all_epochs() -> None:
    torch.manual_seed(0)
    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(3), PPOConfig(lr=0.05, target_kl=1e-4))
    stats = policy.update(0, rollout_buffer(policy), batch_size=16, repeat=10)
    assert stats["early_stop"] == 1.0
    assert stats["gradient_steps"] < 80


def test_dual_clip_bounds_the_loss_of_negative_advantages() -> None:
    """With a huge ratio and A < 0 the plain clipped loss grows with the ratio; dual clip caps
    it at -c * A, so its gradient through the ratio vanishes."""
    ratio = torch.tensor([50.0], requires_grad=True)
    adv = torch.tensor([-1.0])
    for dual, expect_grad in ((None, True), (3.0, False)):
        surr = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        if dual is not None:
            surr = torch.where(adv < 0, torch.max(surr, dual * adv), surr)
        (g,) = torch.autograd.grad(-surr.sum(), ratio)
        assert (float(g) != 0.0) == expect_grad
    # and the policy's own loss path with dual clip runs end to end
    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(dual_clip=3.0, value_clip=True))
    stats = policy.update(0, rollout_buffer(policy), batch_size=32, repeat=2)
    assert np.isfinite(stats["loss"])


def test_observation_statistics_are_updated_per_collect_and_saved_in_state_dict() -> None:
    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(obs_norm=True))
    buf = rollout_buffer(policy, n=32)
    policy.update(0, buf, batch_size=16, repeat=1)
    assert int(policy.obs_rms.count) == 64
    state = policy.state_dict()
    assert "obs_rms.mean" in state and "obs_rms.var" in state
    other = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(obs_norm=True))
    other.load_state_dict(state)
    obs = np.ones((4, 3), np.float32)
    torch.testing.assert_close(other.encode(obs), policy.encode(obs))
    # testing (eval mode) acts with the same statistics and does not update them
    policy.eval()
    policy(Batch(obs=obs))
    assert int(policy.obs_rms.count) == 64


def test_value_scaling_trains_the_critic_on_scaled_returns() -> None:
    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(value_scaling=True))
    buf = rollout_buffer(policy, n=32)
    batch = policy.process_fn(buf[buf.sample_index(0)], buf, buf.sample_index(0))
    assert float(policy.ret_rms.count) == 64
    scaled_std = float(batch.returns.std())
    assert 0.3 < scaled_std < 3.0


def test_learning_rate_follows_the_linear_schedule() -> None:
    policy = PPOPolicy(BOX_OBS, gym.spaces.Discrete(2), PPOConfig(lr=1e-3, lr_decay_steps=1000))
    policy.set_env_step(250)
    assert policy.optim_step.lr == pytest.approx(7.5e-4)
    policy.set_env_step(5000)
    assert policy.optim_step.lr == 0.0


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "InvertedPendulum-v5"])
def test_mujoco_env_ids_get_the_papers_settings_without_a_config_file(env_id: str) -> None:
    config = build_config("ppo", flags={"env": {"id": env_id}}, spec_lookup=spec_lookup)
    assert config.env.id == env_id
    assert (config.trainer.step_per_collect, config.trainer.batch_size) == (2048, 64)
    assert config.trainer.max_env_steps == 1_000_000
    assert (config.algo.lr, config.algo.lr_decay_steps) == (3e-4, 1_000_000)
    assert config.algo.obs_norm and config.algo.value_scaling


def test_halfcheetah_starts_its_policy_narrower_and_the_other_mujoco_tasks_do_not() -> None:
    # HalfCheetah's own preset: the MuJoCo settings, and an initial log-std of -1 (presets.py)
    cheetah = build_config("ppo", flags={"env": {"id": "HalfCheetah-v5"}}, spec_lookup=spec_lookup)
    hopper = build_config("ppo", flags={"env": {"id": "Hopper-v5"}}, spec_lookup=spec_lookup)
    assert cheetah.algo.log_std_init == -1.0 and hopper.algo.log_std_init == 0.0
    assert cheetah.trainer == hopper.trainer and cheetah.algo.obs_norm
    space = gym.spaces.Box(-1.0, 1.0, (6,), dtype=np.float32)
    policy = PPOPolicy(gym.spaces.Box(-1.0, 1.0, (17,), dtype=np.float32), space, cheetah.algo)
    stds = [m.log_std for m in policy.modules() if getattr(m, "log_std", None) is not None]
    assert len(stds) == 1 and torch.equal(stds[0].data, torch.full((6,), -1.0))
    mine = build_config(
        "ppo", flags={"env": {"id": "HalfCheetah-v5"}}, overrides=["algo.log_std_init=0"],
        spec_lookup=spec_lookup,
    )
    assert mine.algo.log_std_init == 0.0


def test_cartpole_and_pendulum_keep_their_own_settings() -> None:
    cartpole = build_config("ppo", spec_lookup=spec_lookup)
    assert cartpole.env.id == "CartPole-v1"
    assert (cartpole.trainer.step_per_collect, cartpole.trainer.batch_size) == (256, 256)
    assert not cartpole.algo.obs_norm and cartpole.algo.lr_decay_steps is None
    assert cartpole.env.num_test_envs == cartpole.trainer.test_episodes == 100
    pendulum = build_config("ppo", flags={"env": {"id": "Pendulum-v1"}}, spec_lookup=spec_lookup)
    assert pendulum.algo.gamma == 0.9 and not pendulum.algo.obs_norm
    assert pendulum.algo.value_scaling and pendulum.trainer.step_per_collect == 2048


def test_user_flags_beat_the_mujoco_settings() -> None:
    config = build_config(
        "ppo", flags={"env": {"id": "HalfCheetah-v5"}, "trainer": {"batch_size": 512}},
        overrides=["algo.lr=1e-3"], spec_lookup=spec_lookup,
    )
    assert config.trainer.batch_size == 512 and config.algo.lr == 1e-3
    assert config.trainer.step_per_collect == 2048


# -- training to thresholds (fixed seeds) --------------------------------------------------------
def train(env: str, stop: float, overrides: list[str], tmp_path, seed: int = 0):
    return rlblocks.train(
        "ppo",
        env=env,
        seed=seed,
        stop_reward=stop,
        loggers=[],
        progress=False,
        run_dir=tmp_path / "run",
        overrides=overrides,
    )


@pytest.mark.slow
def test_ppo_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = train("CartPole-v1", 475.0, [], tmp_path)
    assert result.solved and result.best_test_return >= 475.0, result


@pytest.mark.slow
def test_ppo_reaches_minus_250_on_pendulum_with_its_pendulum_defaults(tmp_path) -> None:
    result = train("Pendulum-v1", -250.0, [], tmp_path)
    assert result.solved and result.best_test_return >= -250.0, result


@pytest.mark.slow
def test_ppo_reaches_950_on_mujoco_inverted_pendulum(tmp_path) -> None:
    pytest.importorskip("mujoco")
    # The MuJoCo defaults (obs normalisation, value scaling, minibatch 64) with a larger learning
    # rate and a 150k-step budget, so that this easy task fits the CI budget.
    overrides = [
        "algo.lr=1e-3",
        "trainer.test_interval=8000",
        "trainer.test_episodes=20",
        "env.num_test_envs=20",
        "trainer.max_env_steps=150000",
    ]
    result = train("InvertedPendulum-v5", 950.0, overrides, tmp_path)
    assert result.solved and result.best_test_return >= 950.0, result
