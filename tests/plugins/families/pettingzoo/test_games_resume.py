"""Game envs resume exactly: a run on a ``games/`` id that crashes with games under way and is
resumed ends with the weights of the same run left alone, on dummy and in worker processes,
against a random opponent and in self-play; self-play refreshes send only what changed."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

import rlblocks
from rlblocks.collect import Collector, env_state
from rlblocks.plugins import hookimpl
from rlblocks.run import make_policy, make_vector_env
from rlblocks.run._checkpoint import from_plain, load_checkpoint
from rlblocks_family_pettingzoo.games import GameEnv, PolicySnapshot, SelfPlay

TTT = "games/tictactoe_v3"


class _Crash(Exception):
    pass


class _CrashAt:
    """Raises from the first rollout hook at or past ``env_step`` (after a checkpoint)."""

    def __init__(self, env_step: int) -> None:
        self.env_step = env_step

    @hookimpl
    def rlblocks_rollout_end(self, env_step: int) -> None:
        if env_step >= self.env_step:
            raise _Crash(env_step)


def _latest(run: Path) -> dict[str, Any]:
    return load_checkpoint(sorted((run / "checkpoints").glob("gen-*"))[-1] / "latest.pt")


#: a copy every 4 gradient steps, two kept, each game against either: copies leave the pool
#: while games against them are under way
_SELF_PLAY = 'env.make_kwargs.self_play={"every": 4, "pool_size": 2, "sample": "uniform"}'


def _crash_and_resume(
    tmp_path: Path, algo: str, backend: str, steps: int, crash: int, overrides: list[str],
    capfd: pytest.CaptureFixture[str],
) -> tuple[Any, Any, dict[str, Any]]:  # fmt: skip
    """The run left alone, the run crashed after a checkpoint and resumed, and the collector
    state that checkpoint kept."""
    common = dict(env=TTT, seed=4, max_env_steps=steps, backend=backend, loggers=[],
                  progress=False, quiet=True, overrides=overrides)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = rlblocks.train(algo, run_dir=tmp_path / "whole", **common)
        with pytest.raises(_Crash):
            rlblocks.train(algo, run_dir=tmp_path / "cut", hooks=[_CrashAt(crash)], **common)
        saved = from_plain(_latest(tmp_path / "cut")["collectors"]["train"])
        capfd.readouterr()
        resumed = rlblocks.resume(tmp_path / "cut")
    assert "restart" not in capfd.readouterr().err  # the games continued
    assert (resumed.env_steps, resumed.gradient_steps) == (whole.env_steps, whole.gradient_steps)
    a, b = whole.agent.policy.state_dict(), resumed.agent.policy.state_dict()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    return whole, resumed, saved


@pytest.mark.parametrize("opponent", ["random", "self"])
@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_a_game_run_crashed_mid_game_resumes_bit_identical(
    tmp_path: Path, backend: str, opponent: str, capfd: pytest.CaptureFixture[str]
) -> None:
    overrides = [
        "env.num_envs=2", "env.num_test_envs=1", "trainer.test_episodes=2",
        "trainer.step_per_collect=10", "trainer.checkpoint_interval=50",
        "trainer.warmup_steps=40", "algo.hidden_sizes=[16]", "buffer.size=1000",
        f"env.make_kwargs.opponent={opponent}", _SELF_PLAY,
    ]  # fmt: skip
    _, _, saved = _crash_and_resume(tmp_path, "dqn", backend, 300, 170, overrides, capfd)
    # the checkpoint it resumed from had games under way (against a copy, in self-play)
    assert saved["why"] == "" and max(saved["episodes"]["ep_len"]) > 0
    games = [e["env"]["layers"][-1]["state"] for e in saved["envs"]]
    if opponent == "self":
        assert any(g["opponent"]["current"] is not None for g in games)
        pools = [_latest(tmp_path / r)["plugins"]["self_play"] for r in ("whole", "cut")]
        assert pools[0]["versions"] == pools[1]["versions"]  # the pool resumed too
        assert all(torch.equal(x[k], y[k]) for x, y in zip(*(p["states"] for p in pools))
                   for k in x)  # fmt: skip


def test_a_self_play_run_drawing_from_torch_resumes_bit_identical_in_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """PPO samples its actions from torch's global generator, which on the dummy backend is
    also where the opponents' copies are built: a resumed env builds its copy at another moment
    than the run left alone did, so building one must not draw from that generator."""
    overrides = [
        "env.num_envs=2", "env.num_test_envs=1", "trainer.test_episodes=2",
        "trainer.step_per_collect=64", "trainer.checkpoint_interval=100",
        "algo.hidden_sizes=[16]", "env.make_kwargs.opponent=self", _SELF_PLAY,
    ]  # fmt: skip
    _crash_and_resume(tmp_path, "ppo", "dummy", 512, 300, overrides, capfd)


def _play(env: gym.Env, moves: int, seed: int) -> list[Any]:
    """``moves`` random legal learner moves (new games as they end): what the env returned."""
    rng, out = np.random.default_rng(seed), []
    game = env.unwrapped
    for _ in range(moves):
        legal = np.flatnonzero(game.aec.observe(game.seat)["action_mask"])
        obs, rew, term, trunc, info = env.step(int(rng.choice(legal)))
        out.append((obs["observation"].tobytes(), rew, term, trunc, sorted(info.items())))
        if term or trunc:
            out.append(env.reset()[1])
    return out


def _pool(policy: Any, versions: range) -> list[PolicySnapshot]:
    pool = []
    for v in versions:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.1 * v)  # each copy plays differently
        pool.append(PolicySnapshot.of(policy, "dqn", {"hidden_sizes": [16]}, v))
    return pool


def test_a_self_play_copy_that_left_the_pool_mid_game_finishes_it_after_a_restore() -> None:
    env = gym.make(TTT, opponent="self", self_play={"sample": "latest"})
    policy = make_policy("dqn", env.observation_space, env.action_space, hidden_sizes=[16])
    pool = _pool(policy, range(3))
    env.unwrapped.self_play_pool = pool[:2]
    env.reset(seed=5)
    assert env.unwrapped.opponent._current == 1
    env.unwrapped.self_play_update = {"add": [pool[2]], "drop": [0, 1]}  # 1 leaves mid-game
    snap = pickle.loads(pickle.dumps(env_state.snapshot(env)))  # as it travels from a worker
    assert snap is not None
    assert snap["layers"][-1]["state"]["opponent"]["left_pool"]["version"] == 1
    twin = gym.make(TTT, opponent="self", self_play={"sample": "latest"})
    twin.unwrapped.self_play_pool = [pool[2]]  # what SelfPlay sends on resume
    env_state.restore(twin, snap)
    assert _play(twin, 30, 1) == _play(env, 30, 1)  # copy 1 ends its game, then copy 2 plays
    assert twin.unwrapped.opponent.results == env.unwrapped.opponent.results


def test_a_random_opponent_continues_its_games_from_random_seats() -> None:
    env = gym.make(TTT, opponent="random", seat="random")
    env.reset(seed=2)
    _play(env, 5, 0)
    twin = gym.make(TTT, opponent="random", seat="random")
    env_state.restore(twin, env_state.snapshot(env))
    assert _play(twin, 40, 3) == _play(env, 40, 3)


def test_an_opponent_that_cannot_be_snapshotted_restarts_its_games_and_says_why() -> None:
    def first_legal(obs: dict[str, np.ndarray]) -> int:
        return int(np.flatnonzero(obs["action_mask"])[0])

    envs = make_vector_env("dummy", TTT, num_envs=2, seed=0,
                           make_kwargs={"opponent": first_legal})  # fmt: skip
    try:
        collector = Collector(None, envs, None, seed=0)
        collector.collect(n_step=6, random=True)
        state = collector.state_dict()
    finally:
        envs.close()
    assert state["envs"] is None
    assert "GameEnv" in state["why"] and "first_legal" in state["why"]
    assert "snapshot_state()" in state["why"]


class _SpyEnvs:
    """A vector env that records the pickled size and the copies of each set_attr call."""

    def __init__(self, envs: Any) -> None:
        self.envs = envs
        self.calls: list[tuple[str, int, int, Any]] = []

    def get_attr(self, name: str, env_ids: Any = None) -> list[Any]:
        return self.envs.get_attr(name, env_ids)

    def set_attr(self, name: str, value: Any, env_ids: Any = None) -> None:
        copies = value if name == "self_play_pool" else value["add"]
        self.calls.append((name, len(pickle.dumps(value)), len(copies), env_ids))
        self.envs.set_attr(name, value, env_ids)


def _trainer(policy: Any, envs: Any, step: int) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(policy=policy, state=SimpleNamespace(gradient_step=step),
                           train_collector=SimpleNamespace(envs=envs))  # fmt: skip


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_self_play_refreshes_send_only_what_changed_and_pools_stay_as_before(
    backend: str,
) -> None:
    probe = GameEnv()
    policy = make_policy("dqn", probe.observation_space, probe.action_space, hidden_sizes=[16])
    hook = SelfPlay(every=1, pool_size=4)
    hook.rlblocks_configure({"algo_name": "dqn", "algo": {"hidden_sizes": [16]}}, None)
    envs = make_vector_env(backend, TTT, num_envs=3, seed=0, make_kwargs={"opponent": "self"})
    spy = _SpyEnvs(envs)
    expected: list[PolicySnapshot] = []  # the pool the old way sent whole at each refresh
    try:
        for step in range(8):
            hook.rlblocks_rollout_end({}, 0, _trainer(policy, spy, step))
            expected = [*expected, hook.pool[-1]][-4:]
            for pool in envs.get_attr("self_play_pool"):
                assert [s.version for s in pool] == [s.version for s in expected]
                for got, want in zip(pool, expected):
                    assert all(torch.equal(got.state[k], want.state[k]) for k in want.state)
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(0.01)  # the learner moves on
        names = [c[0] for c in spy.calls]
        assert names == ["self_play_pool"] + ["self_play_update"] * 7
        assert [c[2] for c in spy.calls[1:]] == [1] * 7  # one copy per refresh, not the pool
        sizes = [c[1] for c in spy.calls[1:]]
        assert max(sizes) - min(sizes) < 0.05 * min(sizes)  # flat while the pool grows 1 -> 4
        # an env whose worker was made again (its pool empty) gets the whole pool back
        envs.set_attr("self_play_pool", [], [1])
        spy.calls.clear()
        hook.rlblocks_rollout_end({}, 0, _trainer(policy, spy, 100))
        assert [(c[0], c[2]) for c in spy.calls] == [("self_play_update", 1),
                                                     ("self_play_pool", 4)]  # fmt: skip
        pools = envs.get_attr("self_play_pool")
        assert [[s.version for s in p] for p in pools] == [[s.version for s in hook.pool]] * 3
    finally:
        envs.close()
