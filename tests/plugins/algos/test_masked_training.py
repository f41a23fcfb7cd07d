"""DQN and PPO learn an env with action masks from scratch and never send a masked action

# the support module (envs importable by path) lives in tests/support
sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from tests_support_masked import ILLEGAL, OPTIMAL_RETURN, masked_env, unmasked_env  # noqa: E402
(acting, exploring, warm-up and tests); the control, the same env with its mask hidden, sends
them and stays far below the masked agents' return.

The env (tests_support_masked.MaskedChoiceEnv): each step the best action is legal only half
the time, a masked action ends the episode at -5. The best legal action every step returns
6.6 per episode on average; uniformly random legal actions about 2.8. Measured (seed 0): DQN
6.5 after 4,000 steps, PPO 6.6 after 10,240 steps, the hidden-mask DQN control 0.0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rlblocks
from rlblocks.trainers import TrainResult

# the support module (envs importable by path) lives in tests/support
sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from tests_support_masked import ILLEGAL, OPTIMAL_RETURN, masked_env, unmasked_env

#: a test return that needs the best legal action nearly always (random legal: about 2.8)
THRESHOLD = 5.8

COMMON = ["env.num_envs=4", "env.num_test_envs=4", "trainer.test_episodes=40"]
DQN = [*COMMON, "trainer.test_interval=1000", "trainer.warmup_steps=200",
       "algo.eps_decay_steps=2000", "algo.hidden_sizes=[32]", "buffer.size=5000"]  # fmt: skip
PPO = [*COMMON, "trainer.test_interval=2500"]


def _train(algo: str, env, steps: int, overrides: list[str], tmp_path) -> TrainResult:
    ILLEGAL["count"] = 0
    return rlblocks.train(
        algo, env=env, seed=0, loggers=[], quiet=True, max_env_steps=steps,
        overrides=overrides, run_dir=tmp_path / "run",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "steps", "overrides"), [("dqn", 4000, DQN), ("ppo", 10000, PPO)])
def test_masked_agent_learns_and_never_sends_a_masked_action(
    algo: str, steps: int, overrides: list[str], tmp_path
) -> None:
    assert THRESHOLD < OPTIMAL_RETURN
    result = _train(algo, masked_env, steps, overrides, tmp_path)
    assert ILLEGAL["count"] == 0, f"{algo} sent {ILLEGAL['count']} masked actions"
    assert result.last_test_return >= THRESHOLD, result


@pytest.mark.slow
def test_the_control_without_masks_sends_masked_actions(tmp_path) -> None:
    result = _train("dqn", unmasked_env, 4000, DQN, tmp_path)
    assert ILLEGAL["count"] > 100
    assert result.best_test_return < THRESHOLD - 2.0, result


def test_masks_in_info_train_through_the_wrapper(tmp_path) -> None:
    # an env that reports its mask in info: env.wrappers moves it into the observation
    from tests_support_masked import info_masked_env

    overrides = [
        "env.num_envs=2", "env.num_test_envs=2", "trainer.warmup_steps=200",
        "trainer.test_interval=400", "trainer.test_episodes=4",
        'env.wrappers=["rlblocks.contracts:ActionMaskFromInfo"]',
    ]  # fmt: skip
    result = _train("dqn", info_masked_env, 800, overrides, tmp_path)
    assert ILLEGAL["count"] == 0 and result.env_steps >= 800
