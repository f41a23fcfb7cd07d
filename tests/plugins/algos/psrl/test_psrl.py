"""PSRL: the posterior it keeps, the MDP it solves, exact checkpoints, and FrozenLake."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import Batch, ConfigError
from rlblocks_algo_psrl.config import PSRLConfig
from rlblocks_algo_psrl.psrl import PSRLPolicy, value_iteration

S3, A2 = gym.spaces.Discrete(3), gym.spaces.Discrete(2)


def _batch(rows: list[tuple[int, int, float, int, bool]]) -> Batch:
    obs, act, rew, nxt, term = (np.array(col) for col in zip(*rows))
    return Batch(obs=obs, act=act, rew=rew.astype(float), obs_next=nxt, terminated=term)


def test_value_iteration_of_a_known_mdp() -> None:
    # state 0: action 1 pays 1 and ends; action 0 pays 0 and moves to state 1, where either
    # action pays 2 and ends. With gamma 0.5: Q(0, 0) = 0.5 * 2 = 1, Q(0, 1) = 1, Q(1, .) = 2
    reward = np.array([[0.0, 1.0], [2.0, 2.0]])
    p = np.zeros((2, 2, 3))
    p[0, 0, 1] = p[0, 1, 2] = p[1, 0, 2] = p[1, 1, 2] = 1.0
    np.testing.assert_allclose(value_iteration(reward, p, 0.5, 1e-9, 100), [[1, 1], [2, 2]])
    np.testing.assert_allclose(value_iteration(reward, p, 0.9, 1e-9, 100)[0], [1.8, 1.0])


def test_the_posterior_follows_the_counts_and_ends_go_to_their_own_outcome() -> None:
    cfg = PSRLConfig(reward_prior_mean=0.0, reward_prior_std=1.0, reward_noise_std=0.5)
    policy = PSRLPolicy(S3, A2, cfg)
    policy.learn(_batch([(0, 1, 1.0, 2, False), (0, 1, 3.0, 2, False), (2, 0, 5.0, 1, True)]))
    alpha = policy.transition_posterior()
    assert alpha[0, 1].tolist() == [1.0, 1.0, 3.0, 1.0]  # prior 1 + two visits to state 2
    assert alpha[2, 0].tolist() == [1.0, 1.0, 1.0, 2.0]  # a terminated step: "the end"
    mean, std = policy.reward_posterior()
    # two rewards summing to 4 with noise variance 0.25: precision 1 + 2 / 0.25 = 9
    assert mean[0, 1] == pytest.approx((4.0 / 0.25) / 9.0) and std[0, 1] == pytest.approx(1 / 3)
    assert mean[1, 0] == 0.0 and std[1, 0] == 1.0  # untried: the prior


def test_it_acts_greedily_on_the_mdp_it_sampled() -> None:
    policy = PSRLPolicy(S3, A2)
    policy.seed(0)
    policy.learn(_batch([(0, 0, 0.0, 1, False)]))
    out = policy(Batch(obs=np.array([0, 1, 2])))
    np.testing.assert_array_equal(out.act, policy.q_sampled.numpy().argmax(axis=1))


def test_a_space_it_cannot_tabulate_is_one_line() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    with pytest.raises(ConfigError, match="Discrete observations, got Box"):
        PSRLPolicy(box, A2)
    with pytest.raises(ConfigError, match="Discrete actions, got Box"):
        PSRLPolicy(S3, box)


def test_a_restored_policy_samples_the_mdps_the_original_would() -> None:
    rows = _batch([(0, 0, 0.5, 1, False), (1, 1, 1.0, 2, True)])
    first = PSRLPolicy(S3, A2)
    first.seed(3)
    first.learn(rows)
    copy = PSRLPolicy(S3, A2)
    copy.load_state_dict(first.state_dict())
    copy.load_extra_state(first.extra_state())
    np.testing.assert_array_equal(copy.q_sampled.numpy(), first.q_sampled.numpy())
    first.learn(rows)
    copy.learn(rows)  # the same counts and the same generator: the same next MDP
    np.testing.assert_array_equal(copy.q_sampled.numpy(), first.q_sampled.numpy())


@pytest.mark.slow
def test_psrl_solves_slippery_frozenlake(tmp_path) -> None:
    """FrozenLake-v1 4x4, slippery (gymnasium's default): gymnasium's threshold is a success
    rate of 0.70 over 100 test episodes (the best policy succeeds about 0.74-0.82 of the time).
    With the algorithm's defaults, tuning seeds 0-4 reached it at 7k, 4k, 2k, 7k and 13k env
    steps; the budget is 20k, checked on seed 10."""
    result = rlblocks.train(
        "psrl", env="FrozenLake-v1", seed=10, loggers=[], progress=False, quiet=True,
        run_dir=tmp_path / "run", max_env_steps=20_000,
    )  # fmt: skip
    assert result.solved and result.best_test_return >= 0.70, result
