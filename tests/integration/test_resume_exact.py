"""Reproducible resume: a run that crashes after a checkpoint and is resumed ends with the same
weights, bit for bit, as the same run left alone — the envs' running episodes, every random
stream and the loop's own memory continue from the checkpoint. Envs that cannot be snapshotted
say so and restart their episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import EnvWorkerError
from rlblocks.plugins import hookimpl
from rlblocks.run import make_vector_env

_NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class _Crash(Exception):
    pass


class _CrashAt:
    """Raises from the first rollout hook at or past ``env_step``: the process dies mid-run,
    after some checkpoint, before the next."""

    def __init__(self, env_step: int) -> None:
        self.env_step = env_step

    @hookimpl
    def rlblocks_rollout_end(self, stats: dict, env_step: int, trainer: Any) -> None:
        if env_step >= self.env_step:
            raise _Crash(env_step)


def _weights(result: rlblocks.TrainResult) -> dict[str, torch.Tensor]:
    return result.agent.policy.state_dict()


def _crash_and_resume(
    tmp_path: Path, algo: str, env: Any, steps: int, crash: int, overrides: list[str]
) -> tuple[rlblocks.TrainResult, rlblocks.TrainResult]:
    sets = [f"trainer.max_env_steps={steps}", f"trainer.checkpoint_interval={steps // 6}",
            f"trainer.test_interval={steps // 4}", "trainer.test_episodes=3",
            "env.num_test_envs=3", *overrides]  # fmt: skip
    kw = {"seed": 3, "overrides": sets, "progress": False, "loggers": [], "quiet": True}
    whole = rlblocks.train(algo, env=env, run_dir=tmp_path / "whole", **kw)
    with pytest.raises(_Crash):
        rlblocks.train(algo, env=env, run_dir=tmp_path / "cut", hooks=[_CrashAt(crash)], **kw)
    assert not (tmp_path / "cut" / "result.json").exists()
    resumed = rlblocks.resume(tmp_path / "cut", env=None if isinstance(env, str) else env)
    return whole, resumed


@pytest.mark.parametrize(
    ("algo", "env", "steps", "crash", "overrides"),
    [
        pytest.param("dqn", "CartPole-v1", 3000, 1700, [], id="dqn"),
        pytest.param("dqn", "CartPole-v1", 2000, 1100, ["env.backend=subproc", "env.num_envs=4"],
                     id="dqn-subproc"),
        pytest.param("ppo", "CartPole-v1", 6000, 3500, [], id="ppo"),
        # the curiosity module (weights and optimizer in the policy's extra state) continues
        pytest.param("ppo", "CartPole-v1", 6000, 3500, ["algo.intrinsic=icm"], id="ppo-icm"),
        pytest.param("dqn", "CartPole-v1", 3000, 1700, ["algo.intrinsic=icm"], id="dqn-icm"),
        # PSRL: the posterior's counts and the generator that samples the next MDP
        pytest.param("psrl", "FrozenLake-v1", 3000, 1700, [], id="psrl"),
        pytest.param("sac", "Pendulum-v1", 1600, 1300, ["trainer.warmup_steps=1000"],
                     id="sac-pendulum"),
        # SimBa networks: the running observation statistics resume with the weights
        pytest.param("sac", "Pendulum-v1", 1600, 1300,
                     ["trainer.warmup_steps=1000", "algo.network=simba", "algo.network_width=32"],
                     id="sac-simba"),
        pytest.param("dqn", "CartPole-v1", 2000, 1100,
                     ["algo.network=simba", "algo.network_width=32"], id="dqn-simba"),
        pytest.param("ppo", "CartPole-v1", 4000, 2500,
                     ["algo.network=simba", "algo.network_width=32"], id="ppo-simba"),
        # Atari: the emulator (sticky actions' RNG too), stacked frames, noisy nets, priorities
        pytest.param("rainbow", "ALE/Pong-v5", 600, 350,
                     ["env.make_kwargs.max_num_frames_per_episode=2000", "buffer.size=1000",
                      "trainer.warmup_steps=200", "env.num_test_envs=1",
                      "trainer.test_episodes=1"], id="rainbow-atari"),
        # on a GPU the random draws (SAC's sampled actions, TD3's noise, REDQ's critic subset)
        # come from the GPU's generator, which the checkpoint keeps; eager and captured steps
        pytest.param("sac", "Pendulum-v1", 1600, 1300,
                     ["trainer.warmup_steps=1000", "run.device=cuda", "algo.cuda_graph=false"],
                     marks=_NEEDS_CUDA, id="sac-pendulum-cuda"),
        *(pytest.param(algo, "Pendulum-v1", 1600, 1300,
                       ["trainer.warmup_steps=1000", "run.device=cuda", "algo.cuda_graph=true"],
                       marks=_NEEDS_CUDA, id=f"{algo}-pendulum-cuda-graph")
          for algo in ("sac", "td3", "redq")),
        pytest.param("sac", "Pendulum-v1", 1600, 1300,
                     ["trainer.warmup_steps=1000", "run.device=cuda", "algo.cuda_graph=true",
                      "algo.network=simba", "algo.network_width=64"],
                     marks=_NEEDS_CUDA, id="sac-simba-pendulum-cuda-graph"),
    ],
)
def test_crash_then_resume_ends_bit_identical_to_an_uninterrupted_run(
    tmp_path: Path, algo: str, env: str, steps: int, crash: int, overrides: list[str], capfd
) -> None:
    whole, resumed = _crash_and_resume(tmp_path, algo, env, steps, crash, overrides)
    assert "restart" not in capfd.readouterr().err  # the episodes continued
    assert resumed.env_steps == whole.env_steps
    assert resumed.gradient_steps == whole.gradient_steps
    assert resumed.best_test_return == whole.best_test_return
    a, b = _weights(whole), _weights(resumed)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    if whole.agent.policy.curiosity is not None:  # not a submodule: compared on its own
        a, b = (r.agent.policy.curiosity.state_dict() for r in (whole, resumed))
        assert [k for k in a if not torch.equal(a[k], b[k])] == []


class _Tally(gym.Wrapper):
    """Stateful in a way rlblocks cannot snapshot."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.tally = 0

    def step(self, action: Any) -> Any:
        self.tally += 1
        return self.env.step(action)


def _tally_cartpole() -> gym.Env:
    return _Tally(gym.make("CartPole-v1"))


def test_envs_that_cannot_be_snapshotted_say_so_and_restart_reproducibly(
    tmp_path: Path, capfd
) -> None:
    _, first = _crash_and_resume(tmp_path / "1", "dqn", _tally_cartpole, 2000, 1100, [])
    err = capfd.readouterr().err
    assert "running training episodes restart on resume" in err and "_Tally" in err
    _, second = _crash_and_resume(tmp_path / "2", "dqn", _tally_cartpole, 2000, 1100, [])
    a, b = _weights(first), _weights(second)  # restarted episodes come from the saved streams
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("backend", ["dummy", "subproc", "shmem"])
def test_vector_env_snapshots_continue_episodes_and_keep_reset_flags(backend: str) -> None:
    rng = np.random.default_rng(0)
    actions = rng.integers(2, size=(60, 3))

    def run(venv: Any, acts: np.ndarray) -> list[bytes]:
        out = []
        for a in acts:
            obs, rew, term, trunc, _ = venv.step(a)
            out.append(obs.tobytes() + rew.tobytes() + term.tobytes() + trunc.tobytes())
            done = np.flatnonzero(term | trunc)
            if len(done):
                out.append(venv.reset(done)[0].tobytes())
        return out

    venv = make_vector_env(backend, "CartPole-v1", 3, seed=0)
    twin = make_vector_env(backend, "CartPole-v1", 3)
    try:
        run(venv, actions[:25])
        snaps = venv.snapshot()
        assert [s["why"] for s in snaps] == ["", "", ""]
        expected = run(venv, actions[25:])
        twin.restore(snaps)
        assert run(twin, actions[25:]) == expected
        # an env whose episode ended before the snapshot must still be reset after restore
        while True:
            _, _, term, trunc, _ = venv.step(np.zeros(3, dtype=np.int64))
            if (term | trunc).any():
                break
        finished = int(np.flatnonzero(term | trunc)[0])
        snaps = venv.snapshot()
        assert snaps[finished]["needs_reset"]
        twin.restore(snaps)
        with pytest.raises(EnvWorkerError):
            twin.step(np.zeros(3, dtype=np.int64))
    finally:
        venv.close()
        twin.close()


def test_a_hook_may_checkpoint_numpy_arrays(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    class Keeper:
        @hookimpl
        def rlblocks_checkpoint_save(self, checkpoint: dict, trainer: Any) -> None:
            checkpoint["keeper"] = {"hist": np.arange(5, dtype=np.float32) * trainer.state.tests}

        @hookimpl
        def rlblocks_checkpoint_load(self, checkpoint: dict) -> None:
            seen.update(checkpoint["keeper"])

    sets = ["trainer.max_env_steps=400", "trainer.warmup_steps=64", "trainer.test_interval=200",
            "trainer.test_episodes=2", "env.num_test_envs=2"]  # fmt: skip
    kw = {"seed": 0, "progress": False, "loggers": [], "quiet": True}
    rlblocks.train("dqn", overrides=sets, run_dir=tmp_path / "r", hooks=[Keeper()], **kw)
    rlblocks.resume(tmp_path / "r", overrides=["trainer.max_env_steps=600"], hooks=[Keeper()])
    assert seen["hist"].dtype == np.float32
    assert np.array_equal(seen["hist"], np.arange(5, dtype=np.float32) * 2)


def test_the_checkpoint_keeps_the_gpu_generators_and_resume_continues_them(
    tmp_path: Path, monkeypatch, capfd
) -> None:
    from rlblocks.run import _seeding as experiment
    from rlblocks.run import load_checkpoint

    # a stand-in for a run on two GPUs (on a GPU, the sac-pendulum-cuda case above runs it all)
    states = [torch.arange(8, dtype=torch.uint8), torch.arange(8, 16, dtype=torch.uint8)]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in states])
    sets = ["trainer.max_env_steps=400", "trainer.warmup_steps=64", "trainer.test_interval=200",
            "trainer.test_episodes=2", "env.num_test_envs=2", "run.device=cpu"]  # fmt: skip
    kw = {"seed": 0, "progress": False, "loggers": [], "quiet": True}
    rlblocks.train("dqn", overrides=sets, run_dir=tmp_path / "r", **kw)
    (ckpt,) = sorted((tmp_path / "r" / "checkpoints").glob("*/latest.pt"))[-1:]
    saved = load_checkpoint(ckpt)["cuda_rng"]
    assert [s.tolist() for s in saved] == [s.tolist() for s in states]

    # resumed where there are fewer GPUs: the ones there continue, the rest is named
    calls: list[tuple[list[int], int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, i: calls.append((s.tolist(), i)))
    experiment._set_cuda_rng_state(saved)
    assert calls == [(states[0].tolist(), 0)]
    assert "random streams of 2 GPU(s) and this machine has 1" in capfd.readouterr().err
    # a CPU run's checkpoint holds none, and restores nothing
    calls.clear()
    experiment._set_cuda_rng_state(None)
    assert calls == []
