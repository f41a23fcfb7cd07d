"""Runs of the joint-view learners (QMIX, VDN, MADDPG, MASAC) back from their directories:
``rlblocks.load`` acts per agent as the trained policy does, ``evaluate`` and ``rlblocks eval``
replay the run's tests with returns per agent, and ``--video`` records them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.collect import to_numpy
from rlblocks.contracts import Batch, ConfigError

#: the four joint-view learners; their defaults train on MPE's simple_spread (two agents;
#: continuous moves for MADDPG and MASAC)
ALGOS = ("qmix", "vdn", "maddpg", "masac")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=ALGOS)
def run(request, tmp_path_factory) -> tuple[str, object, object]:
    """A tiny run with one test at its end, so best.pt holds the weights it ends with."""
    algo = request.param
    pytest.importorskip(f"rlblocks_algo_{'qmix' if algo == 'vdn' else algo}")
    run_dir = tmp_path_factory.mktemp(algo) / "run"
    result = rlblocks.train(
        algo, seed=0, max_env_steps=300, loggers=[], progress=False, quiet=True,
        run_dir=run_dir,
        overrides=["trainer.warmup_steps=64", "trainer.batch_size=32",
                   "trainer.test_interval=300", "trainer.test_episodes=2", "env.num_envs=2",
                   "env.num_test_envs=2"],
    )  # fmt: skip
    return algo, run_dir, result


def _pettingzoo_env(agent: object) -> object:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(**agent.config.env.make_kwargs)


def test_load_acts_per_agent_as_the_trained_policy_does(run) -> None:
    from rlblocks_family_pettingzoo import JointAgent, JointAgentEnv

    algo, run_dir, result = run
    agent = rlblocks.load(run_dir)
    assert isinstance(agent, JointAgent)
    assert agent.agents == ["agent_0", "agent_1"]
    discrete = algo in ("qmix", "vdn")
    trained = result.agent.policy
    trained.eval()
    env = _pettingzoo_env(agent)  # what a user steps
    joint = JointAgentEnv(_pettingzoo_env(agent))  # what the run trained on, with its state
    obs, _ = env.reset(seed=3)
    joint_obs, _ = joint.reset(seed=3)
    steps = 0
    while env.agents:
        actions = agent.act(obs)
        assert list(actions) == list(obs)
        for a, x in actions.items():
            space = env.action_space(a)
            assert space.contains(x), (a, x, space)
            assert np.shape(x) == space.shape
        with torch.inference_mode():
            out = trained(Batch(obs={k: v[None] for k, v in joint_obs.items()}), None)
        want = joint.agent_actions(trained.map_action(to_numpy(out.act))[0])
        for a in obs:
            if discrete:
                assert actions[a] == want[a]
            else:
                np.testing.assert_allclose(actions[a], want[a], rtol=1e-5, atol=1e-6)
        obs, *_ = env.step(actions)
        joint_obs, *_ = joint.step(np.stack([actions[a] for a in joint.agents]))
        steps += 1
    assert steps == 25
    env.close()
    joint.close()


def test_evaluate_replays_the_runs_test_with_returns_per_agent(run) -> None:
    _, run_dir, result = run
    agent = rlblocks.load(run_dir)
    # the run tested with 2 episodes on its 2 test envs, seeded run.seed + 100_000
    res = agent.evaluate(episodes=2, seed=100_000, num_envs=2)
    assert res.mean == pytest.approx(result.best_test_return)
    assert sorted(res.agent_returns) == ["agent_0", "agent_1"]
    assert all(len(r) == 2 for r in res.agent_returns.values())
    # a joint-view run's return is the team's: the sum over the agents
    per_agent = np.stack(list(res.agent_returns.values()))
    assert np.allclose(res.returns, per_agent.sum(axis=0))
    assert np.allclose(res.total_returns, res.returns)
    assert list(res.lengths) == [25, 25]


def test_cli_eval_prints_and_writes_returns_per_agent(run, tmp_path, capsys) -> None:
    _, run_dir, _ = run
    out = tmp_path / "eval.json"
    assert cli(["eval", str(run_dir), "--episodes", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "eval: 2 episodes" in printed and "per agent: agent_0" in printed
    saved = json.loads(out.read_text())
    assert sorted(saved["agent_returns"]) == ["agent_0", "agent_1"]
    assert np.allclose(saved["returns"], saved["total_returns"])


def test_bad_input_is_named_in_one_line(run) -> None:
    _, run_dir, _ = run
    agent = rlblocks.load(run_dir)
    obs = np.zeros(agent.observation_space["agent_0"].shape, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"acts on \{agent_id: observation\}"):
        agent.act(obs)
    with pytest.raises(ConfigError, match="has shape"):
        agent.act({"agent_0": obs[:3]})
    with pytest.raises(ConfigError, match="gives agent 'agent_0' the spaces"):
        agent.evaluate(episodes=1, make_kwargs={"N": 3})
    with pytest.raises(ConfigError, match="cannot step multi-agent"):
        agent.evaluate(episodes=1, backend="subproc")


def test_a_recorded_video_plays_the_evaluated_episode(tmp_path) -> None:
    """``rlblocks eval RUN --video`` of a joint-view run: a video with a frame per step and
    the first, whose episode is the one evaluate plays with the same seed."""
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("rlblocks_algo_qmix")
    run_dir = tmp_path / "run"
    rlblocks.train(
        "vdn", seed=0, max_env_steps=100, loggers=[], progress=False, quiet=True,
        run_dir=run_dir,
        overrides=["trainer.warmup_steps=64", "trainer.batch_size=32",
                   "trainer.test_interval=100", "trainer.test_episodes=1", "env.num_envs=2",
                   "env.num_test_envs=1"],
    )  # fmt: skip
    video = tmp_path / "spread.mp4"
    assert cli(["eval", str(run_dir), "--episodes", "1", "--seed", "4", "--video",
                str(video)]) == 0  # fmt: skip
    frames = np.stack(list(iio.imiter(video)))
    assert frames.shape[0] == 26 and frames.shape[-1] == 3  # 25 steps and the first frame
    assert frames.std() > 5.0 and not np.array_equal(frames[0], frames[-1])
    agent = rlblocks.load(run_dir)
    rec = agent.record(tmp_path / "spread.gif", seed=4)
    evaluated = agent.evaluate(episodes=1, seed=4, num_envs=1)
    assert rec.returns == pytest.approx(evaluated.returns, rel=1e-5)
    assert rec.agent_returns.keys() == evaluated.agent_returns.keys()
    with pytest.raises(ConfigError, match="needs a PettingZoo env id"):
        agent.record(tmp_path / "x.gif", env=lambda: None)


def test_a_recurrent_run_acts_with_its_state_as_evaluate_plays(tmp_path) -> None:
    """Recurrent QMIX: ``act`` takes and gives the GRU state as single-agent agents do; an
    episode played with it (and one recorded) returns what evaluate's collector returns."""
    pytest.importorskip("rlblocks_algo_qmix")
    pytest.importorskip("imageio")
    run_dir = tmp_path / "run"
    rlblocks.train(
        "qmix", seed=0, max_env_steps=200, loggers=[], progress=False, quiet=True,
        run_dir=run_dir,
        overrides=["algo.recurrent=true", "algo.rnn_hidden=16", "algo.hidden_sizes=[16]",
                   "buffer.sampler=sequence", "buffer.start=episode", "buffer.length=25",
                   "trainer.batch_size=4", "trainer.warmup_steps=100",
                   "trainer.test_interval=200", "trainer.test_episodes=2", "env.num_envs=2",
                   "env.num_test_envs=2"],
    )  # fmt: skip
    agent = rlblocks.load(run_dir)
    env = _pettingzoo_env(agent)
    obs, _ = env.reset(seed=3)
    state, total, states = None, 0.0, []
    while env.agents:
        actions, state = agent.act(obs, state, return_state=True)
        states.append(state["h"].clone())
        obs, rew, *_ = env.step(actions)
        total += sum(rew.values())
    env.close()
    assert not torch.equal(states[0], states[-1])  # the state moves with the episode
    evaluated = agent.evaluate(episodes=1, seed=3, num_envs=1)
    assert total == pytest.approx(evaluated.returns[0], rel=1e-5)
    recorded = agent.record(tmp_path / "r.gif", seed=3)
    assert recorded.returns[0] == pytest.approx(total, rel=1e-5)
