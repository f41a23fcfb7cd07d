"""BasePolicy.map_action / map_action_inverse (the seeds' action scaling and bounding): random
warm-up actions drawn in env units are stored in network units that map back to exactly the
action the env ran; clip bounds even without scaling; unbounded spaces are refused for
scaling instead of sending NaN actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.algo import BasePolicy
from rlblocks.contracts import ConfigError

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
SPACE = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([10.0, 2.0], np.float32))


@pytest.mark.parametrize("bound", ["clip", "tanh", "none"])
def test_warm_up_actions_map_back_to_what_the_env_ran(bound: str) -> None:
    policy = BasePolicy(OBS, SPACE, action_bound_method=bound)
    env_act = np.array([[9.0, -1.5], [0.3, 1.99], [5.0, 0.0]], np.float32)
    stored = policy.map_action_inverse(env_act)
    np.testing.assert_allclose(policy.map_action(stored), env_act, rtol=1e-5, atol=1e-5)


def test_tanh_inverse_stays_finite_at_the_bounds() -> None:
    policy = BasePolicy(OBS, SPACE, action_bound_method="tanh")
    stored = policy.map_action_inverse(SPACE.low[None].copy())
    assert np.isfinite(stored).all() and (stored < -7).all()


def test_clip_without_scaling_clips_to_the_space() -> None:
    policy = BasePolicy(OBS, SPACE, action_scaling=False, action_bound_method="clip")
    out = policy.map_action(np.array([[1.5, -3.0], [11.0, 0.5]], np.float32))
    assert out.tolist() == [[1.5, -2.0], [10.0, 0.5]]
    assert policy.map_action_inverse(out).tolist() == out.tolist()


def test_scaling_an_unbounded_action_space_is_refused_by_name() -> None:
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ConfigError, match=r"unbounded at \[\[0\], \[1\]\].*action_scaling=false"):
        BasePolicy(OBS, unbounded)
    # without scaling it is fine: actions go to the env as the network gives them
    policy = BasePolicy(OBS, unbounded, action_scaling=False, action_bound_method="none")
    assert policy.map_action(np.array([[7.0, -9.0]], np.float32)).tolist() == [[7.0, -9.0]]


def test_a_dimension_with_equal_bounds_unscales_to_zero() -> None:
    fixed = gym.spaces.Box(np.array([0.0, 1.0], np.float32), np.array([4.0, 1.0], np.float32))
    policy = BasePolicy(OBS, fixed)
    stored = policy.map_action_inverse(np.array([[2.0, 1.0]], np.float32))
    assert stored.tolist() == [[0.0, 0.0]]
    assert policy.map_action(stored).tolist() == [[2.0, 1.0]]
