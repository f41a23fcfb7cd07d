"""Multi-agent envs stepped in this process (the dummy backend) are snapshotted like envs in
worker processes: a restored collector continues its episodes exactly (parallel and AEC envs),
and a run resumed after a crash ends with the weights of a run left alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

import rlblocks
from rlblocks.run import load_checkpoint
from rlblocks.run._checkpoint import from_plain, to_plain
from rlblocks_family_pettingzoo.multiagent import (
    MultiAgentCollector,
    MultiAgentVectorEnv,
    multiagent_factory,
)

SPREAD = "mpe2.simple_spread_v3:parallel_env"
TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"


def _collector(envs, seed: int) -> MultiAgentCollector:
    class Uniform:  # stands in for a policy: the collector acts at random (random=True)
        training = False

    return MultiAgentCollector(Uniform(), envs, None, seed=seed)


@pytest.mark.parametrize(
    ("env_id", "kwargs", "first", "episodes"),
    [(SPREAD, {"max_cycles": 10}, 7, 4), (TICTACTOE, None, 9, None)],
    ids=["parallel", "aec"],
)
def test_a_restored_in_process_collector_continues_its_episodes_exactly(
    env_id, kwargs, first, episodes
) -> None:
    make = multiagent_factory(env_id, kwargs)
    with MultiAgentVectorEnv([make] * 2) as envs, MultiAgentVectorEnv([make] * 2) as twin:
        original = _collector(envs, seed=5)
        original.collect(n_step=first, random=True)  # mid-episode
        state = from_plain(to_plain(original.state_dict()))  # as a checkpoint holds it
        assert state["envs"] is not None, state["why"]
        resumed = _collector(twin, seed=123)  # another seed: only the snapshot can agree
        assert resumed.load_state_dict(state) == ""
        a = original.collect(n_step=40, random=True)
        b = resumed.collect(n_step=40, random=True)
        assert a.n_episode == b.n_episode >= 2
        if episodes is not None:  # the episodes in progress end early (a restart: later)
            assert a.n_episode == episodes
        np.testing.assert_array_equal(a.returns, b.returns)
        np.testing.assert_array_equal(a.lengths, b.lengths)


def test_an_env_holding_state_that_is_not_plain_says_why() -> None:
    make = multiagent_factory(SPREAD, {"max_cycles": 10})
    with MultiAgentVectorEnv([make]) as envs:
        collector = _collector(envs, seed=0)
        collector.collect(n_step=2, random=True)
        envs.envs[0].handle = _Native()  # e.g. a simulator's native handle
        state = collector.state_dict()
        assert state["envs"] is None and "cannot be snapshotted" in state["why"]
        twin = _collector(envs, seed=1)
        assert "cannot be snapshotted" in twin.load_state_dict(state)  # episodes restart


class _Native:
    __slots__ = ()  # no __dict__: nothing plain to record


def test_a_resumed_in_process_run_continues_its_episodes(tmp_path, capfd) -> None:
    """Crash at a checkpoint mid-episode, resume on the dummy backend: the run ends with the
    weights of an uninterrupted one, because the envs continued their episodes."""
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
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        common = dict(seed=2, max_env_steps=280, backend="dummy", loggers=[], progress=False,
                      quiet=True, overrides=overrides)  # fmt: skip
        rlblocks.train("ippo", run_dir=tmp_path / "whole", **common)
        with pytest.raises(KeyboardInterrupt):
            rlblocks.train("ippo", run_dir=tmp_path / "cut", hooks=[Crash()], **common)
        capfd.readouterr()
        resumed = rlblocks.resume(tmp_path / "cut")
    finally:
        torch.set_num_threads(threads)
    assert resumed.env_steps == 280
    assert "restart on resume" not in capfd.readouterr().err

    def weights(run):
        return load_checkpoint(sorted((run / "checkpoints").glob("gen-*"))[-1] / "latest.pt")[
            "policy"
        ]

    whole, cut = weights(tmp_path / "whole"), weights(tmp_path / "cut")
    for k, v in whole.items():
        assert torch.equal(v, cut[k]), k
