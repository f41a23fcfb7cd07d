"""``eps_test`` of every epsilon-greedy algorithm takes effect wherever a policy is tested: the
trainer's test collector (``exploration=False``, the policy in eval mode), ``agent.act`` and
``agent.evaluate``; ``eps_test=0`` (the default) stays greedy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import Batch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(4)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
ALGOS = {"dqn": DISCRETE, "qrdqn": DISCRETE, "c51": DISCRETE, "r2d2": DISCRETE, "bdq": BOX}


def _test_actions(algo: str, eps_test: float) -> np.ndarray:
    """The actions of 400 rows of one fixed observation, acted in test mode."""
    torch.manual_seed(0)  # the same network whatever eps_test
    policy = rlblocks.make_policy(algo, OBS, ALGOS[algo], eps_test=eps_test)
    policy.seed(0)
    policy.eval()
    obs = np.tile(np.array([[0.3, -0.2, 0.5]], np.float32), (400, 1))
    return np.asarray(policy.map_action(policy(Batch(obs=obs)).act))


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_eps_test_makes_that_share_of_test_actions_random(algo: str) -> None:
    greedy = _test_actions(algo, 0.0)
    assert (greedy == greedy[0]).all()  # one observation, one greedy action
    changed = _test_actions(algo, 0.5) != greedy[0]  # per action dimension for bdq
    # half the picks are random, and a random pick is the greedy one 1 time in 4 (1 in the
    # number of bins for bdq): 0.375 (0.45 with 11 bins) of the entries change
    assert 0.3 < changed.mean() < 0.55, changed.mean()


class _OneStateEnv(gym.Env):
    observation_space = OBS
    action_space = DISCRETE

    def reset(self, *, seed=None, options=None):
        return np.array([0.3, -0.2, 0.5], np.float32), {}

    def step(self, action):
        return np.array([0.3, -0.2, 0.5], np.float32), float(action == 3), False, False, {}


def test_the_trainer_s_test_collector_plays_eps_test() -> None:
    # what a run's tests use: a collector with exploration=False over the policy in eval mode
    policy = rlblocks.make_policy("dqn", OBS, DISCRETE, eps_test=1.0)
    policy.seed(0)
    policy.eval()
    buf = rlblocks.make_buffer("replay", size=500)
    Collector(policy, _OneStateEnv(), buf, exploration=False, seed=0).collect(n_step=400)
    counts = np.bincount(buf.act[:400], minlength=4)
    assert (counts > 60).all(), counts  # uniformly random, not the one greedy action
