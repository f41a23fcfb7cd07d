"""MAPPO: the critic learns from the env's global state stored with every agent step, the
actor acts on each agent's own observation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

from mpe2 import simple_spread_v3

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks.run import make_buffer, make_policy
from rlblocks_algo_mappo.config import MAPPOConfig
from rlblocks_algo_mappo.mappo import MAPPOPolicy
from rlblocks_family_pettingzoo import MultiAgentCollector, MultiAgentVectorEnv


def _envs(n: int = 2) -> MultiAgentVectorEnv:
    make = lambda: simple_spread_v3.parallel_env(N=3, max_cycles=10, continuous_actions=False)  # noqa: E731
    return MultiAgentVectorEnv([make] * n)


def _collected(config: MAPPOConfig | None = None, n_step: int = 25):
    envs = _envs()
    space_o, space_a = envs.observation_space("agent_0"), envs.action_space("agent_0")
    policy = make_policy(
        "mappo", space_o, space_a, config=config or MAPPOConfig(), state_space=envs.state_space
    )
    buffer = make_buffer("replay", 1_000, envs.num_slots)
    MultiAgentCollector(policy, envs, buffer, seed=0).collect(n_step=n_step)
    return policy, buffer, envs


def test_the_global_state_is_stored_with_every_agent_step() -> None:
    _, buffer, _ = _collected()
    idx = buffer.sample_indices(0)
    batch = buffer[idx]
    gs, gs_next = np.asarray(batch.global_state), np.asarray(batch.global_state_next)
    assert gs.shape == (len(idx), 54) and gs_next.shape == gs.shape
    # within an episode, a step's next state is the state the agent's next step acted in
    nxt = buffer.next(idx)
    inside = (nxt != idx) & ~np.asarray(batch.terminated) & ~np.asarray(batch.truncated)
    assert inside.any()
    np.testing.assert_array_equal(gs_next[inside], np.asarray(buffer[nxt].global_state)[inside])
    # MPE's state is every agent's observation side by side
    obs = np.asarray(batch.obs)
    agent = np.asarray(batch.agent)
    for k in range(3):
        rows = agent == k
        np.testing.assert_allclose(gs[rows, 18 * k : 18 * (k + 1)], obs[rows])


def test_the_critic_reads_the_global_state_and_the_update_learns() -> None:
    policy, buffer, _ = _collected()
    before = [p.detach().clone() for p in policy.critic.parameters()]
    stats = policy.update(0, buffer, batch_size=64, repeat=2)
    assert np.isfinite(stats["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.critic.parameters()))
    data = {
        "obs": torch.zeros(4, 18),
        "global_state": torch.zeros(4, 54),
    }
    v0 = policy.critic_value(data)
    data["global_state"] = torch.ones(4, 54)
    assert not torch.allclose(v0, policy.critic_value(data))


def test_without_own_observations_every_agent_of_a_step_gets_one_value() -> None:
    policy, _, _ = _collected(MAPPOConfig(critic_obs=False))
    data = {"obs": torch.randn(5, 18), "global_state": torch.randn(1, 54).expand(5, 54)}
    v = policy.critic_value(data)
    assert torch.allclose(v, v[0].expand(5))


def test_mappo_needs_a_global_state(tmp_path) -> None:
    envs = _envs(1)
    with pytest.raises(ConfigError, match="global state"):
        MAPPOPolicy(envs.observation_space("agent_0"), envs.action_space("agent_0"))
    with pytest.raises(ConfigError, match="global state"):
        rlblocks.train(
            "mappo",
            env="CartPole-v1",
            max_env_steps=1000,
            loggers=[],
            quiet=True,
            run_dir=tmp_path / "run",
        )


def test_a_run_by_name_trains_and_tests(tmp_path) -> None:
    result = rlblocks.train(
        "mappo", seed=0, max_env_steps=800, loggers=[], progress=False, quiet=True,
        run_dir=tmp_path / "run",
        overrides=["trainer.test_interval=400", "trainer.test_episodes=4"],
    )  # fmt: skip
    assert result.env_steps == 800 and np.isfinite(result.best_test_return)
