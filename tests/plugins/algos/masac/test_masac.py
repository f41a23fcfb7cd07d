"""MASAC: soft per-agent actors and twin centralised critics over the joint view, the tuned
temperature, a run by name, and learning MPE's cooperative navigation with continuous moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.plugins import hookimpl
from rlblocks_algo_masac.config import MASACConfig
from rlblocks_algo_masac.masac import MASACPolicy
from rlblocks_family_pettingzoo import JointEnvFactory

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_KWARGS = {"N": 2, "max_cycles": 25, "continuous_actions": True}
#: as MADDPG's test: the team return over 20 greedy episodes; random actions score about -39.
#: With the defaults (n_step chosen on seed 0, which passed -22 by 12.5k env steps) runs passed
#: it at 10.0k env steps on seed 2 and 9.2k on seed 3
THRESHOLD = -22.0


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


def _policy(**config) -> tuple[MASACPolicy, object]:
    envs = rlblocks.make_vector_env("dummy", JointEnvFactory(SPREAD, SPREAD_KWARGS), 2, seed=0)
    policy = MASACPolicy(envs.observation_space, envs.action_space, MASACConfig(**config))
    return policy, envs


def test_actors_sample_every_agent_and_act_greedily_in_tests() -> None:
    policy, envs = _policy()
    obs, _ = envs.reset(seed=0)
    policy.train()
    torch.manual_seed(0)
    a1, a2 = policy(Batch(obs=obs)).act, policy(Batch(obs=obs)).act
    assert a1.shape == (2, 2, 5) and not np.allclose(a1, a2)  # samples
    assert np.all(np.abs(a1) <= 1.0)
    policy.eval()
    g1, g2 = policy(Batch(obs=obs)).act, policy(Batch(obs=obs)).act
    np.testing.assert_array_equal(g1, g2)  # the mean action
    rows, _ = policy.split_obs(policy.obs_tensor(obs))
    act, logp = policy.actor(rows, deterministic=True)
    assert logp.shape == (2, 2) and torch.isfinite(logp).all()
    # log pi of the mean action, from torch's Normal and the tanh's change of variables
    mean, log_std = policy.actor.net(rows)[0].chunk(2, dim=-1)
    normal = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())
    want = normal.log_prob(mean).sum(-1) - torch.log(1 - torch.tanh(mean).pow(2)).sum(-1)
    torch.testing.assert_close(logp, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(act, torch.tanh(mean))
    envs.close()


def test_updates_learn_per_agent_soft_targets_and_tune_the_temperature() -> None:
    policy, envs = _policy(alpha=0.5, alpha_lr=0.05)
    buffer = rlblocks.make_buffer("replay", size=500, num_envs=2)
    rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=200)
    envs.close()
    batch, idx = buffer.sample(16)
    assert policy.process_fn(batch, buffer, idx).returns.shape == (16, 2)
    assert policy.critic.members == 2
    alphas = []
    for _ in range(20):
        stats = policy.update(64, buffer)
        alphas.append(float(stats["alpha"]))
        assert all(np.isfinite(float(v)) for v in stats.values())
    # a fresh policy's entropy (about 2.6 nats per agent at log std 0) is far above the target
    # -5 (minus an agent's action dimension), so the temperature falls
    assert alphas[-1] < 0.5 * 0.9
    assert policy.temperature.target_entropy == -5.0


def test_a_run_by_name_with_separate_agents_resumes(tmp_path) -> None:
    run = tmp_path / "run"
    overrides = [
        "trainer.warmup_steps=200", "trainer.test_interval=400", "trainer.test_episodes=2",
        "trainer.checkpoint_interval=400", "trainer.batch_size=32",
        "algo.share_actor=false", "algo.share_critic=false", "algo.critic_input=obs",
    ]  # fmt: skip
    result = rlblocks.train(
        "masac", seed=0, max_env_steps=400, loggers=[], progress=False, quiet=True,
        run_dir=run, overrides=overrides,
    )  # fmt: skip
    assert result.env_steps == 400 and result.gradient_steps > 0
    resumed = rlblocks.resume(run, overrides=["trainer.max_env_steps=800"])
    assert resumed.env_steps == 800 and resumed.gradient_steps > result.gradient_steps


def random_return(episodes: int = 10) -> float:
    """The mean team return of uniformly random joint actions (the control)."""
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
def test_masac_learns_cooperative_navigation(tmp_path) -> None:
    """From scratch on seed 2 (MASAC's n_step was chosen on seed 0) to the threshold within
    20k env steps, far above a random policy (about -39) and the first test."""
    assert random_return() < THRESHOLD - 10  # the threshold is out of a random team's reach
    tests = ReturnLog()
    result = rlblocks.train(
        "masac", seed=2, stop_reward=THRESHOLD, max_env_steps=20_000, loggers=[],
        progress=False, quiet=True, run_dir=tmp_path / "run", hooks=[tests],
    )  # fmt: skip
    assert result.solved, (result.best_test_return, tests.returns)
    assert tests.returns[0] < THRESHOLD - 4  # it learned: the first test was far below
    assert np.isfinite(tests.returns).all()
