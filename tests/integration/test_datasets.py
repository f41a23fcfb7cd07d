"""Datasets for offline learning: Minari datasets read and written, `rlblocks collect` in its four
modes, and runs that start from another run's policy (`--init-from`).

One small DQN run solves CartPole for the whole module (the expert every dataset comes from).
Minari's local datasets folder is a temporary one in every test (MINARI_DATASETS_PATH).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.plugins import hookimpl
from rlblocks.replay import ReplayBuffer
from rlblocks.run import dataset_metadata, latest_checkpoint, load_checkpoint, load_dataset

QUIET: dict[str, Any] = {"loggers": [], "progress": False, "quiet": True}


@pytest.fixture(scope="module")
def expert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DQN run that solved CartPole (mean test return >= 400)."""
    run = tmp_path_factory.mktemp("expert") / "dqn"
    result = rlblocks.train(
        "dqn", seed=0, stop_reward=400, run_dir=run, **QUIET,
        overrides=["trainer.test_episodes=20", "env.num_test_envs=10"],
    )  # fmt: skip
    assert result.solved, result
    return run


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _returns(dataset: Any) -> list[float]:
    return [float(np.sum(ep.rewards)) for ep in dataset.iterate_episodes()]


# -- rlblocks collect ---------------------------------------------------------------------------


def test_collect_writes_a_minari_dataset_that_minari_loads(
    expert: Path, minari_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "rlblocks-tests/cartpole-expert-v0"
    assert cli(["collect", str(expert), "--episodes", "3", "--out", name]) == 0
    assert "wrote minari dataset: 3 episodes" in capsys.readouterr().out
    data = minari.load_dataset(name)
    assert data.total_episodes == 3
    assert data.observation_space == gym.make("CartPole-v1").observation_space
    assert data.action_space == gym.spaces.Discrete(2)
    episodes = list(data.iterate_episodes())
    assert data.total_steps == sum(len(ep.rewards) for ep in episodes)
    for ep in episodes:
        assert ep.observations.shape == (len(ep.rewards) + 1, 4)
        assert ep.terminations[-1] or ep.truncations[-1]
    assert min(_returns(data)) >= 400  # the expert's test actions
    made = data.storage.metadata["rlblocks"]
    assert made == dataset_metadata(name)
    assert (made["mode"], made["episodes"], made["seed"]) == ("expert", 3, 0)
    assert made["run"] == str(expert.resolve()) and made["algo"] == "dqn"
    assert made["checkpoint_sha256"] == _sha256(expert / "checkpoints" / "best.pt")
    assert made["rlblocks_version"] and made["steps"] == data.total_steps
    # an existing dataset is refused, then replaced with --overwrite
    assert cli(["collect", str(expert), "--episodes", "1", "--out", name]) == 2
    assert "exists already" in capsys.readouterr().err
    assert cli(["collect", str(expert), "--episodes", "1", "--out", name, "--overwrite"]) == 0
    assert minari.load_dataset(name).total_episodes == 1
    assert [p.name for p in (minari_root / "rlblocks-tests").iterdir()
            if p.name.startswith(".")] == []  # fmt: skip


def _expert_disagreement(agent: Any, path: Path) -> float:
    """The fraction of a dataset's steps whose action is not the agent's test action."""
    buffer = ReplayBuffer.load_hdf5(path)
    rows = buffer[np.arange(len(buffer))]
    return float(np.mean(agent.act(rows.obs) != rows.act))


def test_noisy_mode_takes_random_actions_with_probability_epsilon(
    expert: Path, tmp_path: Path
) -> None:
    agent = rlblocks.load(expert)
    noisy = rlblocks.collect_dataset(expert, tmp_path / "noisy.h5", 3, mode="noisy", epsilon=0.5)
    exact = rlblocks.collect_dataset(expert, tmp_path / "exact.h5", 3, mode="noisy", epsilon=0.0)
    assert noisy.format == "hdf5" and noisy.steps > 0
    # a random action is the expert's half of the time on CartPole: 0.5 * 0.5 differ
    assert 0.15 < _expert_disagreement(agent, noisy.path) < 0.35
    assert _expert_disagreement(agent, exact.path) == 0.0
    assert dataset_metadata(noisy.path)["epsilon"] == 0.5
    assert dataset_metadata(noisy.path)["mode"] == "noisy"
    with pytest.raises(rlblocks.ConfigError, match=r"sigma.*Box actions.*epsilon"):
        rlblocks.collect_dataset(expert, tmp_path / "x.h5", 1, mode="noisy", sigma=0.2)
    with pytest.raises(rlblocks.ConfigError, match="applies to mode 'noisy'"):
        rlblocks.collect_dataset(expert, tmp_path / "x.h5", 1, epsilon=0.2)


def test_noisy_mode_adds_gaussian_noise_to_box_actions(tmp_path: Path) -> None:
    run = tmp_path / "td3"
    rlblocks.train("td3", env="Pendulum-v1", max_env_steps=200, run_dir=run, **QUIET, overrides=[
        "trainer.warmup_steps=100", "trainer.test_episodes=1", "env.num_test_envs=1",
        "trainer.test_interval=200", "env.num_envs=1", "trainer.step_per_collect=100",
        "algo.hidden_sizes=[16]",
    ])  # fmt: skip
    sigma = 0.2
    made = rlblocks.collect_dataset(run, tmp_path / "pendulum", 1, mode="noisy", sigma=sigma)
    data = minari.MinariDataset(made.path / "data")
    ep = next(iter(data.iterate_episodes()))
    agent = rlblocks.load(run)
    noise = ep.actions - agent.act(ep.observations[:-1])
    inside = np.abs(ep.actions) < 2.0  # steps whose noisy action was not clipped to the bounds
    # sigma is in units of half the action range: Pendulum's torque is in [-2, 2]
    assert np.std(noise[inside]) == pytest.approx(sigma * 2.0, rel=0.2)
    assert data.storage.metadata["rlblocks"]["sigma"] == sigma


def test_mixture_mode_plays_a_fraction_of_random_episodes(expert: Path, tmp_path: Path) -> None:
    made = rlblocks.collect_dataset(
        expert, tmp_path / "mixture", 8, mode="mixture", random_fraction=0.25, seed=3
    )
    data = minari.MinariDataset(made.path / "data")
    flags = [m.get("random", False) for m in data.storage.get_episode_metadata(range(8))]
    returns = _returns(data)
    assert sum(flags) == 2 == len(made.metadata["random_episodes"])
    assert all((r < 100) == flag for r, flag in zip(returns, flags, strict=True)), returns
    assert data.storage.metadata["rlblocks"]["random_fraction"] == 0.25


def test_episodes_end_at_the_step_cap_and_an_env_without_a_time_limit_needs_one(
    expert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the expert balances CartPole for its whole 500-step limit: the cap ends every episode
    capped = rlblocks.collect_dataset(expert, tmp_path / "capped.h5", 2, max_steps_per_episode=7)
    rows = ReplayBuffer.load_hdf5(capped.path)[np.arange(capped.steps)]
    assert capped.steps == 14
    assert np.flatnonzero(rows.truncated).tolist() == [6, 13] and not rows.terminated.any()
    assert dataset_metadata(capped.path)["max_steps_per_episode"] == 7
    assert "max_steps_per_episode" not in rlblocks.collect_dataset(
        expert, tmp_path / "limit.h5", 1
    ).metadata  # the env's own limit: nothing to record
    with pytest.raises(rlblocks.ConfigError, match="max_steps_per_episode must be a whole"):
        rlblocks.collect_dataset(expert, tmp_path / "x.h5", 1, max_steps_per_episode=0)
    # an env with no time limit: refused in one line naming the option, not played forever
    from gymnasium.envs.classic_control import CartPoleEnv

    monkeypatch.setattr("rlblocks.run._collect_data._make_env", lambda agent: CartPoleEnv())
    with pytest.raises(rlblocks.ConfigError, match=r"no time limit.*max_steps_per_episode=N"):
        rlblocks.collect_dataset(expert, tmp_path / "x.h5", 1)
    unlimited = rlblocks.collect_dataset(expert, tmp_path / "y.h5", 1, max_steps_per_episode=9)
    assert unlimited.steps == 9
    code = cli(["collect", str(expert), "--episodes", "1", "--out", str(tmp_path / "z.h5"),
                "--max-steps-per-episode", "4"])  # fmt: skip
    assert code == 0 and len(ReplayBuffer.load_hdf5(tmp_path / "z.h5")) == 4


def test_replay_mode_writes_the_runs_whole_replay_buffer(
    expert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = latest_checkpoint(expert).parent / "buffer.h5"
    buffer = ReplayBuffer.load_hdf5(source)
    as_hdf5 = rlblocks.collect_dataset(expert, tmp_path / "replay.h5", mode="replay")
    again = ReplayBuffer.load_hdf5(as_hdf5.path)
    assert len(again) == len(buffer) == as_hdf5.steps
    assert np.array_equal(again.obs, buffer.obs)
    assert dataset_metadata(as_hdf5.path)["replay_buffer_sha256"] == _sha256(source)
    as_minari = rlblocks.collect_dataset(expert, tmp_path / "replay", mode="replay")
    data = minari.MinariDataset(as_minari.path / "data")
    assert data.total_steps == len(buffer)
    firsts = {tuple(ep.observations[0]) for ep in data.iterate_episodes()}
    slots = np.asarray(buffer.sample_index(0))
    starts = buffer.get(slots, "obs")[np.asarray(buffer.prev(slots)) == slots]
    assert len(starts) > 10
    assert {tuple(o) for o in starts} <= firsts  # every episode start the buffer holds
    assert cli(["collect", str(expert), "--mode", "replay", "--episodes", "2", "--out",
                str(tmp_path / "x")]) == 2  # fmt: skip
    assert "leave --episodes out" in capsys.readouterr().err


# -- reading Minari datasets ----------------------------------------------------------------------


class _NestedObs(gym.Env):
    """Dict observations holding a Tuple, discrete actions, 5-step episodes."""

    observation_space = gym.spaces.Dict({
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "pair": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0.0, 1.0, (1,)))),
    })  # fmt: skip
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        return self.observation_space.sample(), float(action), self.t >= 5, False, {}


def _collect_with_minari(env: gym.Env, dataset_id: str, episodes: int, act: Any) -> Any:
    """A Minari dataset written by minari.DataCollector, ``act(obs)`` choosing the actions."""
    collector = minari.DataCollector(env)
    for k in range(episodes):
        obs, _ = collector.reset(seed=k)
        done = False
        while not done:
            obs, _, terminated, truncated, _ = collector.step(act(obs))
            done = terminated or truncated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari asks for an author, a description...
        return collector.create_dataset(dataset_id, algorithm_name="tests")


def test_minari_datasets_of_nested_observations_read_into_a_buffer(minari_root: Path) -> None:
    env = _NestedObs()
    env.action_space.seed(0)
    env.observation_space.seed(0)
    data = _collect_with_minari(env, "nested/obs-v0", 3, lambda _: env.action_space.sample())
    loaded = load_dataset("nested/obs-v0")
    assert loaded.kind == "minari" and loaded.env_actions
    assert loaded.path == minari_root / "nested" / "obs-v0"
    buffer = loaded.buffer
    assert len(buffer) == data.total_steps == 15
    rows = buffer[np.arange(15)]
    episodes = list(data.iterate_episodes())
    pos = np.concatenate([ep.observations["pos"][:-1] for ep in episodes])
    pos_next = np.concatenate([ep.observations["pos"][1:] for ep in episodes])
    first = np.concatenate([ep.observations["pair"][0][:-1] for ep in episodes])
    assert np.array_equal(rows.obs.pos, pos) and np.array_equal(rows.obs_next.pos, pos_next)
    assert np.array_equal(rows.obs.pair["0"], first)  # Tuple entries keyed "0", "1"
    assert rows.obs.pair["1"].shape == (15, 1)
    assert np.array_equal(rows.act, np.concatenate([ep.actions for ep in episodes]))
    assert np.flatnonzero(rows.done).tolist() == [4, 9, 14]
    from rlblocks.run._dataset import check_dataset_spaces

    check_dataset_spaces(buffer, env.observation_space, env.action_space, "nested", "nested")


def test_a_minari_datasets_box_actions_come_in_the_policys_units(minari_root: Path) -> None:
    from rlblocks.run._minari import to_policy_actions

    env = gym.make("Pendulum-v1")
    env.action_space.seed(0)
    data = _collect_with_minari(env, "pendulum/random-v0", 1, lambda _: env.action_space.sample())
    buffer = load_dataset(minari_root / "pendulum" / "random-v0").buffer
    actions = np.concatenate([ep.actions for ep in data.iterate_episodes()])
    policy = rlblocks.make_policy("td3bc", env.observation_space, env.action_space)
    to_policy_actions(buffer, policy)
    assert np.allclose(buffer[np.arange(len(buffer))].act, actions / 2.0)  # torque in [-2, 2]


def test_a_minari_dataset_without_spaces_is_refused_without_making_its_env(
    minari_root: Path,
) -> None:
    env = gym.make("CartPole-v1")
    _collect_with_minari(env, "bare/cartpole-v0", 1, lambda _: 0)
    meta_file = minari_root / "bare" / "cartpole-v0" / "data" / "metadata.json"
    meta = json.loads(meta_file.read_text())
    del meta["observation_space"]
    spec = json.loads(meta["env_spec"])
    spec["entry_point"] = "planted_module_never_imported:Env"
    meta["env_spec"] = json.dumps(spec)
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(rlblocks.ConfigError, match="records no observation_space"):
        load_dataset("bare/cartpole-v0")
    assert "planted_module_never_imported" not in sys.modules


def test_an_offline_run_learns_from_a_minari_collector_dataset_and_a_run_continues_it(
    expert: Path, minari_root: Path, tmp_path: Path
) -> None:
    """discrete CQL learns from a dataset that minari.DataCollector wrote (the expert's actions,
    a fifth of them random); then QR-DQN, whose networks discrete CQL shares, starts online from
    the offline run's weights with the dataset in its replay buffer."""
    agent = rlblocks.load(expert)
    rng = np.random.default_rng(0)
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    data = _collect_with_minari(
        env, "cartpole/expert-v0", 4,
        lambda obs: env.action_space.sample() if rng.random() < 0.2 else int(agent.act(obs)),
    )  # fmt: skip
    offline = tmp_path / "cql"
    result = rlblocks.train(
        "discrete-cql", dataset="cartpole/expert-v0", max_gradient_steps=600, seed=0,
        run_dir=offline, **QUIET, overrides=[
            "trainer.test_interval=300", "trainer.test_episodes=5", "env.num_test_envs=5",
            "algo.num_quantiles=20",
        ],
    )  # fmt: skip
    assert result.best_test_return >= 300, result  # a random policy scores about 22
    config = json.loads((offline / "config.json").read_text())
    assert config["buffer"]["dataset"] == str(minari_root / "cartpole" / "expert-v0")

    online = tmp_path / "qrdqn"
    starts = FirstTest()
    rlblocks.train(
        "qrdqn", init_from=offline, init_buffer=True, max_env_steps=200, stop_reward=1e9,
        run_dir=online, hooks=[starts], **QUIET, overrides=[
            "trainer.test_at_start=true", "trainer.test_episodes=5", "env.num_test_envs=5",
            "trainer.test_interval=200", "trainer.checkpoint_interval=200",
        ],
    )  # fmt: skip
    best = load_checkpoint(offline / "checkpoints" / "best.pt")["policy"]
    assert set(starts.weights) == set(best)
    for key, value in best.items():
        if key != "target.updates":  # the target network's count of updates is the run's own
            assert torch.equal(starts.weights[key], value), key
    buffer = ReplayBuffer.load_hdf5(latest_checkpoint(online).parent / "buffer.h5")
    assert len(buffer) == data.total_steps + 200
    record = json.loads((online / "config.json").read_text())["run"]["init_from"]
    assert (record["algo"], record["buffer"]) == ("discrete-cql", True)
    assert record["data"] == config["buffer"]["dataset"]


# -- --init-from ----------------------------------------------------------------------------------


class FirstTest:
    """Keeps the policy's weights and the mean return of the run's first test (a test at the
    start, before any update: the weights the run started from)."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.mean: float | None = None

    @hookimpl
    def rlblocks_test_end(self, stats, env_step, trainer):
        if self.mean is None:
            assert env_step == 0 and trainer.state.gradient_step == 0
            self.weights = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
            self.mean = float(stats["return_mean"])


def _init_run(run_dir: Path, **kwargs: Any) -> FirstTest:
    first = FirstTest()
    rlblocks.train(
        "dqn", max_env_steps=400, stop_reward=1e9, seed=1, run_dir=run_dir, hooks=[first],
        **QUIET, overrides=[
            "trainer.test_at_start=true", "trainer.test_episodes=10", "env.num_test_envs=10",
            "trainer.test_interval=400", "trainer.checkpoint_interval=400",
            "trainer.warmup_steps=0",
        ], **kwargs,
    )  # fmt: skip
    return first


def test_init_from_starts_from_the_runs_weights(expert: Path, tmp_path: Path) -> None:
    started = _init_run(tmp_path / "init", init_from=expert)
    fresh = _init_run(tmp_path / "fresh")
    best = load_checkpoint(expert / "checkpoints" / "best.pt")["policy"]
    for key, value in best.items():
        if key != "target.updates":  # the target network's count of updates is the run's own
            assert torch.equal(started.weights[key], value), key
    assert started.weights["target.updates"].item() == 0
    assert started.mean is not None and started.mean >= 400  # the expert's own return
    assert fresh.mean is not None and fresh.mean < 100  # an untrained DQN
    record = json.loads((tmp_path / "init" / "config.json").read_text())["run"]["init_from"]
    assert record["run"] == str(expert.resolve()) and record["algo"] == "dqn"
    assert record["sha256"] == _sha256(expert / "checkpoints" / "best.pt")
    assert record["buffer"] is False
    summary = rlblocks.tools.describe_run(tmp_path / "init")
    assert f"started from the weights of the dqn run {expert.resolve()}" in summary


def test_init_from_refuses_networks_that_do_not_fit(
    expert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["train", "c51", "--init-from", str(expert), "--run-dir", str(tmp_path / "c51"),
                "--max-env-steps", "2000"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "does not fit c51's networks: model.body.4.weight has shape (2, 128)" in err
    assert err.count("\n") == 1
    with pytest.raises(rlblocks.ConfigError, match="ppo and dqn share no network"):
        rlblocks.train("ppo", init_from=expert, run_dir=tmp_path / "ppo", **QUIET)
    with pytest.raises(rlblocks.ConfigError, match="trains on-policy; leave out init_buffer"):
        rlblocks.resolve_train_config("ppo", init_from=expert, init_buffer=True)
    with pytest.raises(rlblocks.ConfigError, match="pass that run too"):
        rlblocks.resolve_train_config("dqn", init_buffer=True)


def test_init_from_follows_the_import_trust_rule(expert: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copied-run"
    (copy / "checkpoints").mkdir(parents=True)
    shutil.copy(expert / "checkpoints" / "best.pt", copy / "checkpoints" / "best.pt")
    config = json.loads((expert / "config.json").read_text())
    config["env"]["wrappers"] = ["planted_wrapper_module:Wrapper"]
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(rlblocks.ConfigError, match=r"planted_wrapper_module.*trust_imports=True"):
        rlblocks.resolve_train_config("dqn", init_from=copy)
    assert "planted_wrapper_module" not in sys.modules
