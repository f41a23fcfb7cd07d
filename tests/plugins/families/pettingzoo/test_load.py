"""A multi-agent run back from its directory: ``rlblocks.load`` acts per agent, ``evaluate``
and ``rlblocks eval`` replay the run's tests with returns per agent and in total."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")
pytest.importorskip("rlblocks_algo_ippo")

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import ConfigError, NonFiniteError

SIMPLE_SPREAD = "mpe2.simple_spread_v3:parallel_env"


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[object, object]:
    """A tiny IPPO run with one test (at its end), so best.pt holds the weights it scored."""
    run_dir = tmp_path_factory.mktemp("ma") / "run"
    result = rlblocks.train(
        "ippo", env=SIMPLE_SPREAD, seed=0, max_env_steps=800, loggers=[], progress=False,
        quiet=True, run_dir=run_dir,
        overrides=["trainer.test_interval=800", "trainer.test_episodes=4"],
    )  # fmt: skip
    return run_dir, result


def test_load_acts_per_agent_into_the_env(run) -> None:
    from mpe2 import simple_spread_v3

    run_dir, _ = run
    agent = rlblocks.load(run_dir)
    assert agent.agents == ["agent_0", "agent_1", "agent_2"]
    assert "agent_0" in repr(agent) and "best.pt" in repr(agent)
    env = simple_spread_v3.parallel_env()
    obs, _ = env.reset(seed=1)
    steps = 0
    while env.agents:
        actions = agent.act(obs)
        assert list(actions) == list(obs)
        assert all(env.action_space(a).contains(np.int64(x)) for a, x in actions.items())
        # one shared policy: an agent's action does not depend on the others in the dict
        first = next(iter(obs))
        assert agent.act({first: obs[first]}) == {first: actions[first]}
        obs, *_ = env.step(actions)
        steps += 1
    assert steps == 25


def test_evaluate_replays_the_runs_test_with_returns_per_agent(run) -> None:
    run_dir, result = run
    agent = rlblocks.load(run_dir)
    # the run tested with 4 episodes on its test envs, seeded run.seed + 100_000
    res = agent.evaluate(episodes=4, seed=100_000, num_envs=agent.config.env.num_test_envs)
    assert res.mean == pytest.approx(result.best_test_return)
    assert set(res.agent_returns) == set(agent.agents)
    assert all(len(r) == 4 for r in res.agent_returns.values())
    # the run's return is the mean over the agents; the total their sum
    per_agent = np.stack(list(res.agent_returns.values()))
    assert np.allclose(res.returns, per_agent.mean(axis=0))
    assert np.allclose(res.total_returns, per_agent.sum(axis=0))
    assert "per agent: agent_0" in str(res)


def test_cli_eval_prints_and_writes_returns_per_agent(run, tmp_path, capsys) -> None:
    run_dir, _ = run
    out = tmp_path / "eval.json"
    assert cli(["eval", str(run_dir), "--episodes", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "total return" in printed and "agent_2" in printed
    saved = json.loads(out.read_text())
    assert sorted(saved["agent_returns"]) == ["agent_0", "agent_1", "agent_2"]
    assert np.allclose(
        saved["total_returns"], np.sum(list(saved["agent_returns"].values()), axis=0)
    )


def test_bad_input_is_named_in_one_line(run) -> None:
    run_dir, _ = run
    agent = rlblocks.load(run_dir)
    obs = np.zeros(agent.observation_space["agent_0"].shape, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"acts on \{agent_id: observation\}"):
        agent.act(obs)
    with pytest.raises(ConfigError, match="not agents of the run's env"):
        agent.act({"agent_9": obs})
    with pytest.raises(ConfigError, match="has shape"):
        agent.act({"agent_0": obs[:3]})
    with pytest.raises(NonFiniteError):
        agent.act({"agent_0": np.full_like(obs, np.nan)})
    with pytest.raises(ConfigError, match="cannot step multi-agent"):
        agent.evaluate(episodes=1, backend="subproc")
    with pytest.raises(ConfigError, match="gives agent 'agent_0' the spaces"):
        agent.evaluate(episodes=1, env=SIMPLE_SPREAD, make_kwargs={"N": 2})
    with pytest.raises(ConfigError, match="recording a video of a multi-agent run"):
        agent.record("x.gif")


def test_a_joint_view_run_is_refused_in_one_line(tmp_path) -> None:
    pytest.importorskip("rlblocks_algo_vdn")
    run_dir = tmp_path / "run"
    rlblocks.train(
        "vdn", seed=0, max_env_steps=100, loggers=[], progress=False, quiet=True,
        run_dir=run_dir,
        overrides=["trainer.test_interval=100", "trainer.test_episodes=1", "env.num_envs=2",
                   "env.num_test_envs=1"],
    )  # fmt: skip
    with pytest.raises(ConfigError, match="does not load joint-view runs yet"):
        rlblocks.load(run_dir)
