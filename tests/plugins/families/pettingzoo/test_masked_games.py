"""IPPO on PettingZoo's tic-tac-toe reads the action masks of its Dict observations: no illegal
move in warm-up, training or tests (the env prints "Illegal move" on each one; before masks a
run of this size made hundreds)."""

from __future__ import annotations

import pytest

import rlblocks

pytest.importorskip("pettingzoo.classic")


def test_ippo_makes_no_illegal_tictactoe_move(tmp_path) -> None:
    from pettingzoo.utils.env_logger import EnvLogger

    EnvLogger.mqueue.clear()  # where PettingZoo keeps the warnings it logged
    result = rlblocks.train(
        "ippo", env="pettingzoo.classic.tictactoe_v3:env", seed=0, loggers=[], quiet=True,
        max_env_steps=1200,
        overrides=["env.num_envs=2", "env.num_test_envs=2", "trainer.test_episodes=10",
                   "trainer.test_interval=600"],
        run_dir=tmp_path / "run",
    )  # fmt: skip
    assert result.env_steps >= 1200 and result.train_episodes > 50
    illegal = [m for m in EnvLogger.mqueue if "Illegal move" in str(m)]
    assert not illegal, f"{len(illegal)} illegal moves"
