"""Two-player games as single-agent envs (rlblocks_family_pettingzoo.games): the env, its
opponents, outcome accounting, self-play pools, backends, and win rates in tests and eval."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from rlblocks.cli import main as cli
from rlblocks.collect import OUTCOME_RATES, AsyncCollector, Collector, CollectStats
from rlblocks.contracts import ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.run import TestRecorder, make_policy, make_vector_env
from rlblocks_family_pettingzoo.games import (
    GameEnv,
    Opponent,
    PolicySnapshot,
    RandomOpponent,
    SelfPlay,
    SelfPlayOpponent,
    game_outcome,
    make_opponent,
    play_games,
)

TTT = "games/tictactoe_v3"


def lowest_legal(obs: dict[str, np.ndarray]) -> int:
    """A scripted player: the legal move with the lowest index."""
    return int(np.flatnonzero(obs["action_mask"])[0])


def random_player(seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return lambda obs: int(rng.choice(np.flatnonzero(obs["action_mask"])))


def play_one(env: gym.Env, player: Any) -> tuple[float, dict[str, Any]]:
    """One whole game from a reset env: (the learner's return, the last step's info)."""
    total = 0.0
    obs = env.unwrapped._observe()
    while True:
        obs, r, terminated, truncated, info = env.step(player(obs))
        total += r
        if terminated or truncated:
            return total, info


class SpyOpponent(RandomOpponent):
    """A random opponent that records each observation's mask and its move."""

    def __init__(self) -> None:
        self.moves: list[tuple[np.ndarray, int]] = []

    def act(self, observation: Any, rng: np.random.Generator) -> int:
        action = super().act(observation, rng)
        self.moves.append((np.asarray(observation["action_mask"]).copy(), action))
        return action


# -- the env --------------------------------------------------------------------------------------
def test_game_env_spaces_rewards_and_outcomes() -> None:
    env = gym.make(TTT, opponent="random")
    assert set(env.observation_space.spaces) == {"observation", "action_mask"}
    assert env.action_space == gym.spaces.Discrete(9)
    env.reset(seed=0)
    player = random_player(1)
    seen = set()
    for _ in range(150):
        ret, info = play_one(env, player)
        # the outcome is the learner's: +1 a win, -1 a loss, 0 a draw in tic-tac-toe
        assert info["outcome"] == {1.0: "win", -1.0: "loss", 0.0: "draw"}[ret]
        assert info["opponent"] == "random" and info["seat"] in ("player_1", "player_2")
        seen.add(info["outcome"])
        env.reset()
    assert seen == {"win", "draw", "loss"}


def test_game_outcome_n_players() -> None:
    assert game_outcome({"a": 1, "b": -1}, "a") == "win"
    assert game_outcome({"a": 0, "b": 0, "c": 0}, "b") == "draw"
    assert game_outcome({"a": 2, "b": 2, "c": -4}, "a") == "draw"
    assert game_outcome({"a": 2, "b": 3, "c": -5}, "a") == "loss"
    assert game_outcome({"a": 3, "b": 2, "c": -5}, "a") == "win"


def test_seats_alternate_or_are_fixed_or_random() -> None:
    env = GameEnv(opponent="random", seat="alternate")
    seats = [env.reset(seed=s)[1]["seat"] for s in range(4)]
    assert seats == ["player_1", "player_2", "player_1", "player_2"]
    fixed = GameEnv(opponent="random", seat="player_2")
    assert {fixed.reset(seed=s)[1]["seat"] for s in range(6)} == {"player_2"}
    rand = GameEnv(opponent="random", seat="random")
    assert {rand.reset(seed=s)[1]["seat"] for s in range(20)} == {"player_1", "player_2"}
    with pytest.raises(ConfigError, match="seat='north'"):
        GameEnv(seat="north")


def test_random_opponent_never_plays_an_illegal_move() -> None:
    spy = SpyOpponent()
    env = GameEnv("pettingzoo.classic.connect_four_v3:env", opponent=spy, seat="random")
    env.reset(seed=3)
    player = random_player(4)
    for _ in range(60):
        play_one(env, player)
        env.reset()
    assert len(spy.moves) > 300
    assert all(mask[a] == 1 for mask, a in spy.moves)


def test_scripted_opponent_the_same_game_from_both_seats() -> None:
    """The same scripted players in swapped seats play the same game: the learner's outcome as
    the first player is the mirror of its outcome as the second."""
    mirror = {"win": "loss", "loss": "win", "draw": "draw"}
    env = GameEnv(opponent=lowest_legal, seat="player_1")
    env.reset(seed=0)
    _, first = play_one(env, lowest_legal)
    env2 = GameEnv(opponent=lowest_legal, seat="player_2")
    env2.reset(seed=0)
    _, second = play_one(env2, lowest_legal)
    assert first["outcome"] == mirror[second["outcome"]]
    assert first["opponent"] == "lowest_legal"


def test_an_illegal_learner_move_loses_and_is_marked() -> None:
    env = GameEnv(opponent="random", seat="player_1")
    env.reset(seed=0)
    env.step(4)  # the centre
    with pytest.warns(UserWarning, match="illegal move"):
        _, r, terminated, _, info = env.step(4)  # taken
    assert terminated and r == -1.0 and info["outcome"] == "loss" and info["illegal_move"]
    assert env.illegal_moves == 1


def test_bad_opponents_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not 'random', 'self' or an existing run"):
        GameEnv(opponent=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"self_play\.sample='best'"):
        GameEnv(opponent="self", self_play={"sample": "best"})
    with pytest.raises(ConfigError, match="unknown keys"):
        GameEnv(opponent="self", self_play={"evry": 3})
    with pytest.raises(ConfigError, match=r"self_play\.every=0"):
        SelfPlay(every=0)
    # a run's config is data: a game from a module nobody imported is not imported for it
    with pytest.raises(ConfigError, match="importing it runs its code"):
        GameEnv("not_imported_games_module:env")


# -- collectors count outcomes; tests.csv and the logs get the rates ------------------------------
class RandomLegalPolicy:
    """Just enough of a policy for a Collector: uniform over the legal actions."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.training = False

    def __call__(self, batch: Any, state: Any = None) -> Any:
        masks = np.asarray(batch.obs["action_mask"])
        act = np.array([self.rng.choice(np.flatnonzero(m)) for m in masks])
        return SimpleNamespace(act=act, get=lambda *_: None)

    def map_action(self, act: Any) -> Any:
        return act


@pytest.mark.parametrize(
    ("backend", "collector"),
    [("dummy", Collector), ("subproc", Collector), ("subproc", AsyncCollector)],
)
def test_collector_counts_outcomes(backend: str, collector: type) -> None:
    envs = make_vector_env(backend, TTT, num_envs=2, seed=0, make_kwargs={"opponent": "random"})
    try:
        stats = collector(None, envs, None, seed=0).collect(n_episode=40, random=True)
    finally:
        envs.close()
    assert sum(stats.outcomes.values()) == stats.n_episode == 40
    rates = stats.as_scalars()
    assert set(OUTCOME_RATES) <= set(rates)
    assert sum(rates[k] for k in OUTCOME_RATES) == pytest.approx(1.0)
    wins = int(np.sum(stats.returns > 0))
    assert stats.outcomes.get("win", 0) == wins


def test_no_rates_for_envs_that_are_no_games(tmp_path: Path) -> None:
    envs = make_vector_env("dummy", "CartPole-v1", num_envs=2, seed=0)
    try:
        stats = Collector(None, envs, None, seed=0).collect(n_episode=4, random=True)
    finally:
        envs.close()
    assert stats.outcomes == {} and not set(OUTCOME_RATES) & set(stats.as_scalars())
    rec = TestRecorder(tmp_path, lambda: SimpleNamespace(wall_seconds=1.0, gradient_step=0))
    rec.rlblocks_test_end(stats.as_scalars(), env_step=10)
    header = (tmp_path / "tests.csv").read_text().splitlines()[0].split(",")
    assert header[-1] == "screen" and not set(OUTCOME_RATES) & set(header)


def test_tests_csv_gets_win_draw_loss_columns(tmp_path: Path) -> None:
    stats = CollectStats(n_episode=10, returns=np.zeros(10), lengths=np.ones(10, dtype=np.int64),
                         outcomes={"win": 6, "draw": 1, "loss": 3})  # fmt: skip
    rec = TestRecorder(tmp_path, lambda: SimpleNamespace(wall_seconds=1.0, gradient_step=0))
    rec.rlblocks_test_end(stats.as_scalars(), env_step=10)
    from rlblocks.run import read_tests

    (row,) = read_tests(tmp_path)
    assert (row["win_rate"], row["draw_rate"], row["loss_rate"]) == (0.6, 0.1, 0.3)


# -- self-play ------------------------------------------------------------------------------------
def _dqn(env: gym.Env) -> Any:
    return make_policy("dqn", env.observation_space, env.action_space, hidden_sizes=[16])


def _trainer(policy: Any, envs: Any, step: int) -> Any:
    return SimpleNamespace(
        policy=policy,
        state=SimpleNamespace(gradient_step=step),
        train_collector=SimpleNamespace(envs=envs),
    )


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_self_play_pool_refresh_reaches_the_envs(backend: str) -> None:
    probe = GameEnv()
    policy = _dqn(probe)
    hook = SelfPlay(every=10, pool_size=2)
    hook.rlblocks_configure({"algo_name": "dqn", "algo": {"hidden_sizes": [16]}}, None)
    envs = make_vector_env(backend, TTT, num_envs=2, seed=0, make_kwargs={"opponent": "self"})
    try:
        # before the first copy the fallback plays
        assert [len(p) for p in envs.get_attr("self_play_pool")] == [0, 0]
        versions = []
        for step in (0, 5, 10, 12, 25, 40):  # a copy at 0, 10, 25 and 40
            hook.rlblocks_rollout_end({}, 0, _trainer(policy, envs, step))
            versions.append([[s.version for s in p] for p in envs.get_attr("self_play_pool")])
        assert versions[0] == [[0], [0]]
        assert versions[1] == versions[0]  # 5 steps: no refresh
        assert versions[2] == [[0, 1], [0, 1]]
        assert versions[-1] == [[2, 3], [2, 3]]  # the newest pool_size copies
        # the opponents in the envs play with the copies, and only legal moves
        stats = Collector(None, envs, None, seed=0).collect(n_episode=10, random=True)
        assert sum(stats.outcomes.values()) == 10
    finally:
        envs.close()


def test_self_play_opponent_acts_greedily_as_the_copy() -> None:
    env = GameEnv(opponent="self")
    policy = _dqn(env)
    snap = PolicySnapshot.of(policy, "dqn", {"hidden_sizes": [16]}, version=7)
    snap = pickle.loads(pickle.dumps(snap))  # how it travels to a worker
    env.self_play_pool = [snap]
    _, info = env.reset(seed=0)
    assert info["opponent"] == "self:7"
    opponent = env.opponent
    agent = opponent._agents[7]
    probe = {"observation": np.zeros((3, 3, 2), np.int8), "action_mask": np.ones(9, np.int8)}
    from rlblocks.run import Agent

    assert opponent.act(probe, np.random.default_rng(0)) == int(Agent(policy, None).act(probe))
    assert agent.policy is not policy


def test_sampling_rules() -> None:
    def pool(n: int) -> list[PolicySnapshot]:
        space = gym.spaces.Discrete(2)
        return [PolicySnapshot(v, "dqn", {}, space, space, {}) for v in range(n)]

    latest = SelfPlayOpponent(sample="latest")
    latest.set_pool(pool(3))
    assert latest.weights().tolist() == [0.0, 0.0, 1.0]
    uniform = SelfPlayOpponent(sample="uniform")
    uniform.set_pool(pool(4))
    assert np.allclose(uniform.weights(), 0.25)
    prio = SelfPlayOpponent(sample="prioritized")
    prio.set_pool(pool(3))
    assert np.allclose(prio.weights(), 1 / 3)  # no games yet: all alike
    prio.results = {0: [9.0, 10.0], 1: [1.0, 10.0], 2: [5.0, 10.0]}
    w = prio.weights()
    assert w[1] > w[2] > w[0]  # the copy the learner beats least is picked most
    # results are kept for copies still in the pool, dropped for the others
    prio.set_pool(pool(3)[1:])
    assert set(prio.results) == {1, 2}
    # the games' results feed the rates: a loss against copy 1 keeps it the most likely
    prio._current = 1
    prio.end_game("loss")
    assert prio.results[1] == [1.0, 11.0]


# -- saved runs as opponents; play_games; eval's win rates -----------------------------------------
@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny DQN run on tic-tac-toe (no skill expected: a saved policy to play against)."""
    import rlblocks

    run = tmp_path_factory.mktemp("games") / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rlblocks.train(
            "dqn", env=TTT, run_dir=run, quiet=True, max_env_steps=300, num_envs=1,
            loggers=["csv"],
            overrides=["env.num_test_envs=1", "trainer.test_episodes=4",
                       "trainer.warmup_steps=50", "algo.hidden_sizes=[16]",
                       "env.make_kwargs.opponent=random"],
        )  # fmt: skip
    return run


def test_saved_run_opponent_plays_legal_greedy_moves(saved_run: Path) -> None:
    opponent = make_opponent(str(saved_run))
    spy: list[tuple[np.ndarray, int]] = []

    class Recorder(Opponent):
        def act(self, observation: Any, rng: np.random.Generator) -> int:
            a = opponent.act(observation, rng)
            spy.append((np.asarray(observation["action_mask"]).copy(), a))
            return a

    rates = play_games(random_player(0), TTT, opponent=Recorder(), n=20, seed=0)
    assert sum(rates[k] for k in ("win", "draw", "loss")) == pytest.approx(1.0)
    assert spy and all(mask[a] for mask, a in spy)
    # greedy: the same games again give the same moves
    again = play_games(random_player(0), TTT, opponent=str(saved_run), n=20, seed=0)
    assert again == rates


def test_play_games_against_random() -> None:
    rates = play_games(lowest_legal, TTT, opponent="random", n=50, seed=1)
    assert set(rates) == {"win", "draw", "loss", "illegal"}
    assert rates["illegal"] == 0.0
    assert sum(rates[k] for k in ("win", "draw", "loss")) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="n=0"):
        play_games(lowest_legal, n=0)


def test_training_run_records_rates_and_eval_prints_them(
    saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = (saved_run / "tests.csv").read_text().splitlines()[0].split(",")
    assert header[-4:] == ["screen", *OUTCOME_RATES]
    logged = (saved_run / "logs" / "test.csv").read_text().splitlines()[0].split(",")
    assert set(OUTCOME_RATES) <= set(logged)  # the logs have them too
    out = tmp_path / "eval.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli(["eval", str(saved_run), "--episodes", "12", "--opponent", "random",
                    "--json", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "win " in printed and "loss " in printed
    data = json.loads(out.read_text())
    assert sum(data["outcomes"].values()) == 12
    assert sum(data[k] for k in OUTCOME_RATES) == pytest.approx(1.0)
    assert data["win_rate"] == data["outcomes"].get("win", 0) / 12
    assert cli(["eval", str(saved_run), "--episodes", "4", "--opponent",
                str(tmp_path / "missing")]) != 0  # fmt: skip
    assert "not 'random', 'self' or an existing run" in capsys.readouterr().err


def test_a_self_play_run_fills_its_worker_envs_pools_and_checkpoints_them(tmp_path: Path) -> None:
    """A run on a games/ id with opponent="self" gets the SelfPlay hook by itself; its copies
    reach envs in worker processes (subproc), and its checkpoints keep the pool."""
    import torch

    import rlblocks

    run = tmp_path / "selfplay"
    seen: list[list[int]] = []

    class Watch:
        @hookimpl(trylast=True)  # after SelfPlay's
        def rlblocks_rollout_end(self, trainer: Any) -> None:
            pools = trainer.train_collector.envs.get_attr("self_play_pool")
            seen.append(sorted({s.version for pool in pools for s in pool}))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = rlblocks.train(
            "dqn", env=TTT, backend="subproc", num_envs=2, run_dir=run, quiet=True,
            max_env_steps=400, loggers=[], hooks=[Watch()],
            overrides=["env.num_test_envs=1", "trainer.test_episodes=4",
                       "trainer.warmup_steps=50", "algo.hidden_sizes=[16]",
                       "env.make_kwargs.opponent=self",
                       'env.make_kwargs.self_play={"every": 20, "pool_size": 2}'],
        )  # fmt: skip
    assert result.env_steps >= 400
    assert seen[0] == [0]  # the first copy arrives after the first collect
    assert len(seen[-1]) == 2 and seen[-1][-1] >= 2  # refreshed, the newest two kept
    ckpt = next(run.glob("checkpoints/gen-*/latest.pt"))
    saved = torch.load(ckpt, weights_only=True)["plugins"]["self_play"]
    assert len(saved["versions"]) == 2 and saved["refreshes"] >= 3
    header = (run / "tests.csv").read_text().splitlines()[0].split(",")
    assert header[-3:] == list(OUTCOME_RATES)  # tests play the random fallback


def test_game_envs_declare_their_run_hooks_through_the_contract() -> None:
    """The games' self-play reaches a run through the declared RunHooksEnv capability; envs
    without it (a plain gymnasium id) give a run no hooks."""
    from rlblocks.contracts import RunHooksEnv
    from rlblocks.run._compose import env_run_hooks
    from rlblocks_family_pettingzoo.games import GameEnv, SelfPlay

    assert isinstance(GameEnv, RunHooksEnv)
    hooks = env_run_hooks(TTT, {"env": {"make_kwargs": {"opponent": "self"}}})
    assert [type(h) for h in hooks] == [SelfPlay]
    assert env_run_hooks(TTT, {"env": {"make_kwargs": {"opponent": "random"}}}) == []
    assert env_run_hooks("CartPole-v1", {"env": {}}) == []
