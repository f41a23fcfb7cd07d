"""MADDPG and MATD3: per-agent networks, the paper's actor loss, per-agent targets from the
joint view's agent rewards, runs by name, and learning MPE's cooperative navigation with
continuous moves."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import rlblocks
from rlblocks.contracts import Batch, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks_algo_maddpg.agents import AgentNetwork
from rlblocks_algo_maddpg.config import MADDPGConfig
from rlblocks_algo_maddpg.maddpg import MADDPGPolicy
from rlblocks_family_pettingzoo import JointEnvFactory

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_KWARGS = {"N": 2, "max_cycles": 25, "continuous_actions": True}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class ReturnLog:
    """Records each test's mean return (a screened test's too: the trainer ends a test whose
    first episodes fall clearly short of the stop reward, and logs those as test_screen)."""

    def __init__(self) -> None:
        self.returns: list[float] = []

    @hookimpl
    def rlblocks_log(self, namespace: str, scalars: dict[str, float], step: int) -> None:
        if namespace in ("test", "test_screen") and "return_mean" in scalars:
            self.returns.append(float(scalars["return_mean"]))


def joint_spaces(n: int = 3, obs_dim: int = 4, state_dim: int = 6, act_dim: int = 2):
    obs = gym.spaces.Dict({
        "obs": gym.spaces.Box(-np.inf, np.inf, (n, obs_dim), np.float32),
        "state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32),
    })  # fmt: skip
    return obs, gym.spaces.Box(0.0, 1.0, (n, act_dim), np.float32)


@pytest.mark.parametrize("shared", [True, False])
def test_agent_networks_give_every_agent_its_own_output(shared: bool) -> None:
    torch.manual_seed(0)
    net = AgentNetwork(3, 4, 2, [8], shared=shared, members=2)
    x = torch.randn(5, 3, 4, requires_grad=True)
    out = net(x)
    assert out.shape == (2, 5, 3, 2)
    # agent 1's output reads agent 1's input row only
    out[:, :, 1].sum().backward()
    assert x.grad[:, 1].abs().sum() > 0
    assert x.grad[:, [0, 2]].abs().sum() == 0
    # the same input row gives different agents different outputs (one-hot or own weights)
    same = torch.randn(1, 1, 4).expand(1, 3, 4)
    y = net(same)[0, 0]
    assert not torch.allclose(y[0], y[1]) and not torch.allclose(y[1], y[2])
    # members differ (twin critics are two networks)
    assert not torch.allclose(out[0], out[1])


def test_separate_agents_have_separate_weights() -> None:
    shared = AgentNetwork(3, 4, 1, [8], shared=True)
    separate = AgentNetwork(3, 4, 1, [8], shared=False)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # one network with a 3-wide one-hot, against three networks
    assert count(shared) == (4 + 3) * 8 + 8 + 8 + 1
    assert count(separate) == 3 * (4 * 8 + 8 + 8 + 1)


def test_the_actor_loss_replaces_only_the_agents_own_action() -> None:
    """Agent i's actor follows Q_i at the stored joint action with a_i from its actor: the
    critic of agent i sees the others' stored actions, and agent j's actor (separate actors)
    gets gradient only through Q_j."""
    obs_space, act_space = joint_spaces()
    policy = MADDPGPolicy(obs_space, act_space, MADDPGConfig(share_actor=False))
    own = torch.randn(2, 3, 2)
    stored = torch.randn(2, 3, 2)
    mixed = policy.own_action(own, stored)  # [B, i, j, act]
    for i in range(3):
        for j in range(3):
            want = own[:, j] if i == j else stored[:, j]
            assert torch.equal(mixed[:, i, j], want)

    rows = torch.randn(4, 3, 4, requires_grad=True)
    x = torch.randn(4, 6)
    act = policy.actor(rows)
    q = policy.critic(policy.critic_input(x, policy.own_action(act, torch.zeros_like(act))))
    q[0, :, 0].sum().backward()  # agent 0's critic only
    assert rows.grad[:, 0].abs().sum() > 0
    assert rows.grad[:, 1:].abs().sum() == 0


def _filled(policy, n_step: int = 1):
    envs = rlblocks.make_vector_env("dummy", JointEnvFactory(SPREAD, SPREAD_KWARGS), 2, seed=0)
    buffer = rlblocks.make_buffer("replay", size=500, num_envs=2)
    rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=100)
    envs.close()
    return buffer


@pytest.mark.parametrize("n_step", [1, 3])
def test_targets_are_each_agents_own_rewards(n_step: int) -> None:
    envs = rlblocks.make_vector_env("dummy", JointEnvFactory(SPREAD, SPREAD_KWARGS), 1)
    policy = MADDPGPolicy(
        envs.observation_space, envs.action_space, MADDPGConfig(n_step=n_step, gamma=0.5)
    )
    envs.close()
    buffer = _filled(policy)
    rewards = np.asarray(buffer.get(np.arange(len(buffer)), "info")["agent_rewards"])
    assert rewards.shape == (len(buffer), 2)
    policy.target_value = lambda obs: torch.zeros(len(obs["obs"]), 2)  # no bootstrap
    batch, idx = buffer.sample(16)
    returns = policy.process_fn(batch, buffer, idx).returns.numpy()
    want = np.zeros((16, 2))
    for row, i in enumerate(idx):
        j, discount = i, 1.0
        for _ in range(n_step):
            want[row] += discount * rewards[j]
            discount *= 0.5
            nxt = int(buffer.next(np.array([j]))[0])
            if bool(buffer.get(np.array([j]), "done")[0]) or nxt == j:
                break
            j = nxt
    np.testing.assert_allclose(returns, want, rtol=1e-5, atol=1e-6)
    # targets of the team reward (the agents' sum) would differ: the check can fail
    assert not np.allclose(want[:, 0], want.sum(axis=1))


def test_team_reward_when_agent_rewards_are_off() -> None:
    envs = rlblocks.make_vector_env("dummy", JointEnvFactory(SPREAD, SPREAD_KWARGS), 1)
    policy = MADDPGPolicy(
        envs.observation_space, envs.action_space, MADDPGConfig(agent_rewards=False)
    )
    envs.close()
    assert policy.view_requirements == {}  # nothing more to store
    buffer = _filled(policy)
    policy.target_value = lambda obs: torch.zeros(len(obs["obs"]), 2)
    batch, idx = buffer.sample(8)
    returns = policy.process_fn(batch, buffer, idx).returns.numpy()
    team = np.asarray(batch.rew, dtype=np.float32)
    np.testing.assert_allclose(returns, np.stack([team, team], axis=1), rtol=1e-6)


def test_matd3_delays_the_actor_and_keeps_twin_critics() -> None:
    envs = rlblocks.make_vector_env("dummy", JointEnvFactory(SPREAD, SPREAD_KWARGS), 1)
    policy = MADDPGPolicy(
        envs.observation_space, envs.action_space, MADDPGConfig(td3=True, policy_delay=2)
    )
    envs.close()
    assert policy.critic.members == 2
    buffer = _filled(policy)
    before = [p.detach().clone() for p in policy.actor.parameters()]
    policy.update(32, buffer)  # a critic step only
    assert all(torch.equal(a, p) for a, p in zip(before, policy.actor.parameters()))
    policy.update(32, buffer)  # critic and actor
    assert not all(torch.equal(a, p) for a, p in zip(before, policy.actor.parameters()))


def test_a_single_agent_box_env_is_one_agent() -> None:
    env = gym.make("Pendulum-v1")
    policy = MADDPGPolicy(env.observation_space, env.action_space)
    obs, _ = env.reset(seed=0)
    act = policy(Batch(obs=obs[None])).act
    assert act.shape == (1, 1)
    assert policy.view_requirements == {}


def test_discrete_agents_are_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"supports action spaces \[.Box.\].*MultiDiscrete"):
        rlblocks.train(
            "maddpg", seed=0, max_env_steps=2_000, loggers=[], progress=False, quiet=True,
            run_dir=tmp_path / "run",
            overrides=['env.make_kwargs={"N": 2, "continuous_actions": false}'],
        )  # fmt: skip


def test_a_run_by_name_checkpoints_and_resumes(tmp_path) -> None:
    run = tmp_path / "run"
    overrides = [
        "trainer.warmup_steps=200", "trainer.test_interval=400", "trainer.test_episodes=2",
        "trainer.checkpoint_interval=400", "trainer.batch_size=32",
    ]  # fmt: skip
    result = rlblocks.train(
        "maddpg", seed=0, max_env_steps=400, loggers=[], progress=False, quiet=True,
        run_dir=run, overrides=[*overrides, "algo.td3=true"],
    )  # fmt: skip
    assert result.env_steps == 400 and result.gradient_steps > 0
    resumed = rlblocks.resume(run, overrides=["trainer.max_env_steps=800"])
    assert resumed.env_steps == 800
    assert resumed.gradient_steps > result.gradient_steps


#: the team's return (the sum over both agents) over 20 greedy test episodes of simple_spread
#: with two agents, 25 steps and continuous moves; a uniformly random policy scores about -39.
#: With the defaults (tuned on seeds 0-1, where MADDPG passed -20 by 12.5k-17.5k env steps)
#: runs passed it at 9.1k env steps on seeds 2 and 3 (MADDPG), 10.0k and 12.5k (MATD3)
THRESHOLD = -22.0


def random_return(episodes: int = 10) -> float:
    """The mean team return of uniformly random joint actions."""
    env = JointEnvFactory(SPREAD, SPREAD_KWARGS)()
    env.action_space.seed(0)
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=episode)
        done = False
        while not done:
            _, rew, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(rew)
            done = terminated or truncated
    env.close()
    return total / episodes


@pytest.mark.slow
@pytest.mark.parametrize("td3", [False, True], ids=["maddpg", "matd3"])
def test_maddpg_learns_cooperative_navigation(tmp_path, td3: bool) -> None:
    """From scratch on seed 2 (the defaults were tuned on seeds 0-1) to the threshold within
    20k env steps, far above a random policy and the first test."""
    assert random_return() < THRESHOLD - 10
    tests = ReturnLog()
    result = rlblocks.train(
        "maddpg", seed=2, stop_reward=THRESHOLD, max_env_steps=20_000, loggers=[],
        progress=False, quiet=True, run_dir=tmp_path / "run", hooks=[tests],
        overrides=[f"algo.td3={str(td3).lower()}"],
    )  # fmt: skip
    assert result.solved, (result.best_test_return, tests.returns)
    assert tests.returns[0] < THRESHOLD - 4  # it learned: the first test was far below
    assert np.isfinite(tests.returns).all()
