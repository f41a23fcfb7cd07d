"""Masked DQN and masked PPO learn tic-tac-toe against a random player from scratch: in 100
games afterwards they never make an illegal move and win at least 90% of them (issue 55's bar).
A uniformly random legal player wins about 58% of its games against another (measured here as
the control), so the bar needs real play.

Measured (100 games against random afterwards, game seeds 1000 + training seed): DQN with the
settings below, tuned on seed 1 (95% wins), checked on seed 0 (96%), which the test runs; PPO with
its defaults at 80,000 env steps (30,000 won 96% on seed 0 but 86% on seed 1): seeds 0, 1, 2 won
91%, 97%, 92%, and the test runs seed 2. No run made an illegal move.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlblocks

pytest.importorskip("pettingzoo.classic")

GAME = "games/tictactoe_v3"
COMMON = ["trainer.test_interval=100000000"]  # no tests during training: the games decide
#: (training seed, env steps, settings)
SETTINGS = {
    "dqn": (0, 60_000, [*COMMON, "algo.dueling=true", "trainer.update_per_step=0.5",
                        "algo.n_step=3", "algo.eps_decay_steps=20000", "algo.eps_end=0.02"]),
    "ppo": (2, 80_000, COMMON),
}  # fmt: skip


def _random_legal(rng: np.random.Generator):
    def play(obs) -> int:
        return int(rng.choice(np.flatnonzero(obs["action_mask"])))

    return play


def test_a_random_legal_player_wins_well_under_the_bar() -> None:
    from rlblocks_family_pettingzoo import play_games

    rates = play_games(_random_legal(np.random.default_rng(0)), GAME, opponent="random", n=100,
                       seed=500)  # fmt: skip
    assert rates["illegal"] == 0.0
    assert 0.4 < rates["win"] < 0.75, rates


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(SETTINGS))
def test_masked_learner_beats_random_in_90_of_100_games(algo: str, tmp_path) -> None:
    from rlblocks_family_pettingzoo import play_games

    seed, steps, overrides = SETTINGS[algo]
    run = tmp_path / algo
    rlblocks.train(algo, env=GAME, seed=seed, run_dir=run, max_env_steps=steps, loggers=[],
                   quiet=True, overrides=overrides)  # fmt: skip
    agent = rlblocks.load(run, which="latest")
    rates = play_games(agent, GAME, opponent="random", n=100, seed=1000 + seed)
    assert rates["illegal"] == 0.0, rates
    assert rates["win"] >= 0.9, rates
