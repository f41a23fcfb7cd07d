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
from rlblocks.contracts import ConfigError, NonFiniteError, ViewRequirement

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


def test_the_results_agent_is_the_familys_around_the_trained_policy(run) -> None:
    """``rlblocks.train(...).agent`` of a multi-agent run acts per agent as the loaded run
    does (the run ended on its only test, so best.pt holds the final weights)."""
    from mpe2 import simple_spread_v3

    run_dir, result = run
    agent, loaded = result.agent, rlblocks.load(run_dir)
    assert type(agent) is type(loaded) and agent.agents == loaded.agents
    env = simple_spread_v3.parallel_env()
    obs, _ = env.reset(seed=2)
    for _ in range(5):
        actions = agent.act(obs)
        assert actions == loaded.act(obs)
        obs, *_ = env.step(actions)


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
    with pytest.raises(ConfigError, match="not supported yet; evaluate without render"):
        agent.evaluate(episodes=1, render=True)
    with pytest.raises(ConfigError, match="needs a PettingZoo env id"):
        agent.record("x.gif", env=lambda: None)
    # one observation per agent carries no history: a policy reading views is sent to evaluate
    agent.policy_of("agent_0").view_requirements = {"prev": ViewRequirement("act", shift=-1)}
    with pytest.raises(ConfigError, match=r"trajectory views .*agent.evaluate") as err:
        agent.act({"agent_0": obs})
    assert "\n" not in str(err.value)


def test_record_writes_the_episode_evaluate_plays(run, tmp_path) -> None:
    """A video of an IPPO run (MPE renders rgb_array frames): one frame per step and the
    first, the episode's returns those of evaluate with the same seed."""
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("imageio_ffmpeg")
    run_dir, _ = run
    agent = rlblocks.load(run_dir)
    video = tmp_path / "spread.mp4"
    rec = agent.record(video, episodes=2, seed=7)
    frames = np.stack(list(iio.imiter(video)))
    assert frames.shape[0] == 2 * 26 and frames.shape[-1] == 3  # 25 steps + the first, twice
    assert frames.std() > 5.0
    evaluated = agent.evaluate(episodes=1, seed=7, num_envs=1)
    assert rec.returns[0] == pytest.approx(evaluated.returns[0], rel=1e-5)
    for a, r in evaluated.agent_returns.items():
        assert rec.agent_returns[a][0] == pytest.approx(r[0], rel=1e-5)
    assert list(rec.lengths) == [25, 25]


def test_an_aec_game_is_played_turn_by_turn_for_a_recording() -> None:
    """The env a recording plays over an AEC env: one agent's observation at a time, its
    rewards since its last turn added up, the episode over when no agent is left."""
    tictactoe = pytest.importorskip("pettingzoo.classic.tictactoe_v3")
    from rlblocks_family_pettingzoo.agent import _PlayedEnv

    played: list[dict[str, float]] = []
    env = _PlayedEnv(tictactoe.env(), played)
    rng = np.random.default_rng(0)
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        done, turns = False, 0
        while not done:
            assert len(obs) == 1
            (agent, o), = obs.items()
            legal = np.flatnonzero(o["action_mask"])
            obs, _, terminated, truncated, _ = env.step({agent: int(rng.choice(legal))})
            done = terminated or truncated
            turns += 1
        assert 5 <= turns <= 9
        result = played[-1]
        assert sorted(result) == ["player_1", "player_2"]
        assert result["player_1"] == -result["player_2"] and abs(result["player_1"]) in (0, 1)
    assert len(played) == 3 and any(r["player_1"] != 0 for r in played)
    env.close()
