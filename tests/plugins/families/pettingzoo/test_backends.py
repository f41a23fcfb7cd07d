"""Multi-agent envs in worker processes (``--backend subproc`` and ``shmem``): the same run as in
process, a killed worker reported and restarted, and snapshots that let a resumed run continue
episodes."""

from __future__ import annotations

import os
import signal
import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")
from pettingzoo import ParallelEnv

import rlblocks
from rlblocks.contracts import ConfigError, EnvWorkerError
from rlblocks.run import load_checkpoint
from rlblocks.run._checkpoint import from_plain, to_plain
from rlblocks_family_pettingzoo.multiagent import (
    MultiAgentCollector,
    MultiAgentVectorEnv,
    multiagent_factory,
)
from rlblocks_family_pettingzoo.remote import make_remote_multiagent_env

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SHORT = {"max_cycles": 10}  # 10-step episodes: several end within a few dozen steps
#: the backends that step multi-agent envs in worker processes (shmem: in shared memory)
WORKERS = ["subproc", "shmem"]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # until the process is gone (its pipe then reads as closed)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def _weights(run) -> dict[str, torch.Tensor]:
    ckpt = sorted((run / "checkpoints").glob("gen-*"))[-1] / "latest.pt"
    return load_checkpoint(ckpt)["policy"]


def test_ippo_in_workers_trains_exactly_as_in_process(tmp_path) -> None:
    """Same seed, same run: the envs in workers (pickled or in shared memory) step bit for bit
    as in this process, so the learnt weights and the test return are equal."""
    results, weights = {}, {}
    for backend in ("dummy", *WORKERS):
        run = tmp_path / backend
        results[backend] = rlblocks.train(
            "ippo", seed=0, max_env_steps=200, backend=backend, loggers=[], progress=False,
            quiet=True, run_dir=run,
            overrides=["env.num_envs=2", "env.num_test_envs=2", "trainer.step_per_collect=100",
                       "trainer.test_interval=200", "trainer.test_episodes=2",
                       "trainer.checkpoint_interval=200", 'env.make_kwargs={"max_cycles": 10}',
                       "buffer.size=1000"],
        )  # fmt: skip
        weights[backend] = _weights(run)
    dummy = results["dummy"]
    assert dummy.gradient_steps > 0  # it learnt something, the same in all
    for backend in WORKERS:
        other = results[backend]
        assert other.env_steps == dummy.env_steps == 200, backend
        assert other.train_episodes == dummy.train_episodes == 20, backend
        assert other.best_test_return == dummy.best_test_return, backend
        assert weights["dummy"].keys() == weights[backend].keys()
        for k, v in weights["dummy"].items():
            assert torch.equal(v, weights[backend][k]), (backend, k)


@pytest.mark.parametrize("backend", WORKERS)
def test_the_envs_step_in_worker_processes_like_in_process(backend) -> None:
    make = multiagent_factory(SPREAD, SHORT)
    with (
        make_remote_multiagent_env(backend, make, 2) as remote,
        MultiAgentVectorEnv([make] * 2) as local,
    ):
        assert remote.agents == local.agents and remote.num_slots == local.num_slots == 6
        assert all(pid is not None and pid != os.getpid() for pid in remote.venv.worker_pids)
        remote.track_state = local.track_state = True  # MAPPO's global state, set in workers
        a, b = remote.reset(seed=3), local.reset(seed=3)
        np.testing.assert_array_equal(np.stack(a.ready_state), np.stack(b.ready_state))
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(25):
            acts = rng.integers(5, size=len(a.ready)).tolist()
            a, b = remote.step(a.ready, acts), local.step(b.ready, acts)
            assert (a.ids, a.ready, a.ended_envs, a.rew) == (b.ids, b.ready, b.ended_envs, b.rew)
            np.testing.assert_array_equal(np.stack(a.obs_next), np.stack(b.obs_next))
            np.testing.assert_array_equal(np.stack(a.state_next), np.stack(b.state_next))
            ended += len(a.ended_envs)
        assert ended == 4  # 25 steps of 10-step episodes in 2 envs


TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"  # AEC: one player acts at a time


@pytest.mark.parametrize("backend", WORKERS)
def test_aec_envs_in_workers_play_as_in_process_and_resume_exactly(backend) -> None:
    make = multiagent_factory(TICTACTOE)
    with (
        make_remote_multiagent_env(backend, make, 2) as remote,
        make_remote_multiagent_env(backend, make, 2) as twin,
        MultiAgentVectorEnv([make] * 2) as local,
    ):
        assert remote.aec and remote.agents == ["player_1", "player_2"]
        a, b = _collector(remote, seed=4), _collector(local, seed=4)
        sa, sb = a.collect(n_step=9, random=True), b.collect(n_step=9, random=True)
        np.testing.assert_array_equal(sa.lengths, sb.lengths)
        np.testing.assert_array_equal(sa.returns, sb.returns)
        state = from_plain(to_plain(a.state_dict()))
        resumed = _collector(twin, seed=99)
        assert resumed.load_state_dict(state) == ""
        sa, sc = a.collect(n_step=40, random=True), resumed.collect(n_step=40, random=True)
        assert sa.n_episode >= 2
        np.testing.assert_array_equal(sa.lengths, sc.lengths)
        np.testing.assert_array_equal(sa.returns, sc.returns)


def _collector(envs, seed: int = 0) -> MultiAgentCollector:
    class Uniform:  # stands in for a policy: the collector acts at random (random=True)
        training = False

    return MultiAgentCollector(Uniform(), envs, None, seed=seed)


@pytest.mark.parametrize("backend", WORKERS)
def test_a_killed_worker_is_reported_restarted_and_its_episode_cut_short(backend) -> None:
    make = multiagent_factory(SPREAD, SHORT)
    with make_remote_multiagent_env(backend, make, 2, restart_failed=True) as envs:
        collector = _collector(envs)
        collector.collect(n_step=3, random=True)  # 2 steps of each env (4 env steps)
        victim = envs.venv.worker_pids[1]
        _kill(victim)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = collector.collect(n_step=1, random=True)
        (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        message = str(warning.message)
        assert "\n" not in message
        assert f"pid {victim}, envs [1])" in message and "SIGKILL" in message
        assert "restarting env worker 1" in message
        # env 1 was cut short at its 3rd step
        assert stats.n_episode == 1 and stats.lengths.tolist() == [3]
        assert envs.restarts == 1
        assert envs.venv.worker_pids[1] not in (None, victim)
        stats = collector.collect(n_step=40, random=True)  # both envs go on: 20 steps each
        assert stats.n_episode >= 3 and set(stats.lengths.tolist()) == {10}


@pytest.mark.parametrize("backend", WORKERS)
def test_a_run_whose_worker_is_killed_reports_it_restarts_it_and_finishes(tmp_path, backend):
    """SIGKILL one env's worker during training: one line names the env and the restart, the
    env's episode is cut short and the run goes on to its last step."""
    from rlblocks.plugins import hookimpl

    killed: list[int] = []

    class Killer:
        @hookimpl
        def rlblocks_rollout_end(self, stats, env_step, trainer) -> None:
            if not killed:
                killed.append(trainer.train_collector.envs.venv.worker_pids[1])
                _kill(killed[0])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rlblocks.train(
            "ippo", seed=0, max_env_steps=120, backend=backend, loggers=[], progress=False,
            quiet=True, run_dir=tmp_path / "run", hooks=[Killer()],
            overrides=["env.num_envs=2", "env.num_test_envs=1", "env.restart_failed=true",
                       "trainer.step_per_collect=40", "trainer.test_interval=1000",
                       "trainer.test_episodes=1", 'env.make_kwargs={"max_cycles": 25}',
                       "buffer.size=1000"],
        )  # fmt: skip
    # the step that found the worker dead stepped env 0 only: the count ends one step over
    assert result.env_steps in (120, 121)
    restarts = [str(w.message) for w in caught if "restarting env worker" in str(w.message)]
    assert len(restarts) == 1 and "\n" not in restarts[0]
    assert f"pid {killed[0]}, envs [1])" in restarts[0] and "SIGKILL" in restarts[0]


@pytest.mark.slow  # starting Ray takes 10-20 s
def test_on_ray_the_envs_step_as_in_process_resume_exactly_and_restart_killed_actors() -> None:
    """Ray actors carry the steps as subproc's workers do, snapshot them, and a killed actor is
    reported and replaced like a worker."""
    pytest.importorskip("ray")
    make = multiagent_factory(SPREAD, SHORT)
    with (
        make_remote_multiagent_env("ray", make, 2, restart_failed=True) as remote,
        make_remote_multiagent_env("ray", make, 2) as twin,
        MultiAgentVectorEnv([make] * 2) as local,
    ):
        a, b = _collector(remote, seed=3), _collector(local, seed=3)
        sa, sb = a.collect(n_step=30, random=True), b.collect(n_step=30, random=True)
        assert sa.n_episode == sb.n_episode == 2
        np.testing.assert_array_equal(sa.returns, sb.returns)
        resumed = _collector(twin, seed=99)
        assert resumed.load_state_dict(from_plain(to_plain(a.state_dict()))) == ""
        sa, sc = a.collect(n_step=20, random=True), resumed.collect(n_step=20, random=True)
        assert sa.n_episode == 2  # the episodes in progress end 5 steps on
        np.testing.assert_array_equal(sa.returns, sc.returns)
        np.testing.assert_array_equal(sa.lengths, sc.lengths)
        victim = remote.venv.worker_pids[1]
        _kill(victim)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = a.collect(n_step=1, random=True)
        (message,) = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert "\n" not in message and "envs [1]" in message and "restart" in message
        assert stats.n_episode == 1 and stats.lengths.tolist() == [6]  # cut short at its step 6
        assert remote.restarts == 1 and remote.venv.worker_pids[1] not in (None, victim)
        stats = a.collect(n_step=40, random=True)
        assert set(stats.lengths.tolist()) == {10}


@pytest.mark.parametrize("backend", WORKERS)
def test_a_killed_worker_without_restarts_is_one_clear_error(backend) -> None:
    make = multiagent_factory(SPREAD, SHORT)
    with make_remote_multiagent_env(backend, make, 1) as envs:
        collector = _collector(envs)
        collector.collect(n_step=2, random=True)
        _kill(envs.venv.worker_pids[0])
        with pytest.raises(EnvWorkerError, match=r"env worker 0 .*SIGKILL.*restart_failed=True"):
            collector.collect(n_step=1, random=True)


@pytest.mark.parametrize("backend", WORKERS)
def test_a_restored_collector_continues_its_episodes_exactly(backend) -> None:
    """Snapshot mid-episode (through a checkpoint's plain values), restore into new workers:
    the next steps are those the original goes on to take."""
    make = multiagent_factory(SPREAD, SHORT)
    with (
        make_remote_multiagent_env(backend, make, 2) as first,
        make_remote_multiagent_env(backend, make, 2) as second,
    ):
        original = _collector(first, seed=5)
        original.collect(n_step=7, random=True)  # 4 steps of each env (8 env steps)
        state = from_plain(to_plain(original.state_dict()))
        assert state["envs"] is not None, state["why"]
        resumed = _collector(second, seed=123)
        assert resumed.load_state_dict(state) == ""
        a = original.collect(n_step=40, random=True)  # 20 steps of each env
        b = resumed.collect(n_step=40, random=True)
        # the episodes in progress end 6 steps on (a restart would end them 10 steps on)
        assert a.n_episode == b.n_episode == 4
        np.testing.assert_array_equal(a.returns, b.returns)
        np.testing.assert_array_equal(a.lengths, b.lengths)


def test_a_backend_without_workers_is_refused_in_one_line_naming_those_with() -> None:
    make = multiagent_factory(SPREAD, SHORT)
    with pytest.raises(ConfigError, match=r"'envpool' cannot step multi-agent.*--backend subproc"):
        make_remote_multiagent_env("envpool", make, 1)


class Relay(ParallelEnv):
    """A scripted game whose agents come and go: ``a`` and ``b`` start, ``c`` joins after the
    first step (listed first), and each leaves after a random number of its own steps (so
    agents finish at different times and ``agents`` shrinks). The agents' spaces differ: ``c``
    observes a Dict with an action mask (PettingZoo's convention), ``a`` and ``b`` Boxes of
    different sizes."""

    metadata = {"name": "relay_v0"}  # noqa: RUF012 - PettingZoo's class attribute
    possible_agents = ["a", "b", "c"]  # noqa: RUF012
    state_space = gym.spaces.Box(-1.0, 100.0, (4,), np.float32)

    def __init__(self) -> None:
        self.spaces = {
            "a": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "b": gym.spaces.Box(-1.0, 1.0, (3,), np.float64),
            "c": gym.spaces.Dict({
                "observation": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                "action_mask": gym.spaces.MultiBinary(3),
            }),
        }  # fmt: skip
        self.rng = np.random.default_rng(0)
        self.t = 0
        self.agents: list[str] = []
        self.left: dict[str, int] = {}

    def observation_space(self, agent: str) -> gym.Space:
        return self.spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(3)

    def _obs(self, agent: str) -> Any:
        if agent == "c":
            mask = np.ones(3, np.int8)
            mask[self.t % 3] = 0
            return {"observation": self.rng.random(2).astype(np.float32), "action_mask": mask}
        return self.rng.uniform(-1, 1, self.spaces[agent].shape).astype(self.spaces[agent].dtype)

    def state(self) -> np.ndarray:
        return np.array([self.t, *(self.left.get(a, -1) for a in "abc")], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = ["a", "b"]
        self.left = {a: int(self.rng.integers(1, 5)) for a in self.possible_agents}
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rew, term, trunc = {}, {}, {}
        for agent, action in actions.items():
            self.left[agent] -= 1
            rew[agent] = float(action) + float(self.rng.random())
            term[agent] = self.left[agent] <= 0
            trunc[agent] = False
        obs = {a: self._obs(a) for a in actions}
        self.agents = [a for a in self.agents if not term[a]]
        if self.t == 1:  # c joins, listed first (so agents act out of slot order)
            self.agents.insert(0, "c")
            obs["c"] = self._obs("c")
        return obs, rew, term, trunc, {a: {} for a in obs}


def _same(x: Any, y: Any) -> None:
    if isinstance(x, dict):
        assert x.keys() == y.keys()
        for k in x:
            _same(x[k], y[k])
    else:
        np.testing.assert_array_equal(x, y)
        assert np.asarray(x).dtype == np.asarray(y).dtype


@pytest.mark.parametrize("backend", WORKERS)
def test_agents_that_come_and_go_step_in_workers_as_in_process(backend) -> None:
    """Agents joining late and leaving one by one, with different spaces each: every step's
    transitions, next actors (in order), observations, states and env episodes match."""
    with (
        make_remote_multiagent_env(backend, Relay, 2) as remote,
        MultiAgentVectorEnv([Relay] * 2) as local,
    ):
        remote.track_state = local.track_state = True
        a, b = remote.reset(seed=1), local.reset(seed=1)
        rng = np.random.default_rng(0)
        sizes, ended = set(), 0
        for _ in range(40):
            assert (a.ids, a.ready, a.ended_envs, a.env_steps) == (
                b.ids, b.ready, b.ended_envs, b.env_steps
            )  # fmt: skip
            assert (a.rew, a.terminated, a.truncated) == (b.rew, b.terminated, b.truncated)
            for x, y in zip(a.obs_next + a.ready_obs, b.obs_next + b.ready_obs):
                _same(x, y)
            for x, y in zip(a.state_next + a.ready_state, b.state_next + b.ready_state):
                _same(x, y)
            sizes.add(sum(s < 3 for s in a.ready))  # env 0's agents that act next
            ended += len(a.ended_envs)
            acts = rng.integers(3, size=len(a.ready)).tolist()
            a, b = remote.step(a.ready, acts), local.step(b.ready, acts)
        assert ended >= 4 and {1, 2, 3} <= sizes  # agents came and left, episodes ended


def test_shmem_names_what_it_cannot_lay_out_in_one_line() -> None:
    class NoState(Relay):
        state_space = None

    class Texts(Relay):
        def __init__(self) -> None:
            super().__init__()
            self.spaces["b"] = gym.spaces.Text(5)

    with (
        make_remote_multiagent_env("shmem", NoState, 1) as envs,
        pytest.raises(ConfigError, match=r"NoState declares no Box state_space.*subproc") as err,
    ):
        envs.track_state = True
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"cannot put Text observations.*'subproc'") as err:
        make_remote_multiagent_env("shmem", Texts, 1)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("backend", WORKERS)
def test_a_resumed_run_in_workers_continues_its_episodes(tmp_path, backend, capfd) -> None:
    """Crash at a checkpoint mid-episode, resume: the run ends where an uninterrupted one
    does (same weights), because the envs continued their episodes instead of restarting."""
    from rlblocks.plugins import hookimpl

    class Crash:
        @hookimpl
        def rlblocks_rollout_end(self, stats, env_step, trainer) -> None:
            if env_step >= 140:
                raise KeyboardInterrupt

    overrides = [
        "env.num_envs=2", "env.num_test_envs=1", "trainer.step_per_collect=70",
        "trainer.test_interval=1000", "trainer.test_episodes=1", "trainer.checkpoint_interval=70",
        'env.make_kwargs={"max_cycles": 25}', "buffer.size=1000",
    ]  # fmt: skip
    common = dict(seed=2, max_env_steps=280, backend=backend, loggers=[], progress=False,
                  quiet=True, overrides=overrides)  # fmt: skip
    rlblocks.train("ippo", run_dir=tmp_path / "whole", **common)
    with pytest.raises(KeyboardInterrupt):
        rlblocks.train("ippo", run_dir=tmp_path / "cut", hooks=[Crash()], **common)
    capfd.readouterr()
    resumed = rlblocks.resume(tmp_path / "cut")
    assert resumed.env_steps == 280
    assert "restart on resume" not in capfd.readouterr().err
    whole, cut = _weights(tmp_path / "whole"), _weights(tmp_path / "cut")
    for k, v in whole.items():
        assert torch.equal(v, cut[k]), k


def test_state_that_is_not_plain_values_is_named() -> None:
    import threading

    from rlblocks_family_pettingzoo.snapshot import (
        NotSnapshottable,
        restore_object,
        snapshot_object,
    )

    class Env:
        def __init__(self) -> None:
            self.steps = 3
            self.rng = np.random.default_rng(1)
            self.inner = {"pos": np.zeros(2), "names": ["a", "b"]}

    env, twin = Env(), Env()
    env.steps, env.inner["pos"][:] = 7, 1.5
    env.rng.random()
    restore_object(twin, snapshot_object(env))
    assert twin.steps == 7 and twin.inner["pos"].tolist() == [1.5, 1.5]
    assert twin.rng.random() == env.rng.random()
    env.inner["lock"] = threading.Lock()
    with pytest.raises(NotSnapshottable, match=r"env\.inner\['lock'\] is a _thread\.lock"):
        snapshot_object(env)
