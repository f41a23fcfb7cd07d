"""RunningMeanStd: merged statistics equal those of all data at once, and travel in state_dict.
DatasetObsNorm: a dataset's statistics, fitted once, kept through a checkpoint, refused where they
cannot apply."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlblocks.algo import DatasetObsNorm, RunningMeanStd
from rlblocks.contracts import ConfigError
from rlblocks.replay import ReplayBuffer


def test_batches_merge_to_the_statistics_of_all_data() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    rms = RunningMeanStd((4,))
    for chunk in np.array_split(data, [7, 100, 101, 640]):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-10)
    assert int(rms.count) == 1000


def test_normalize_standardises_and_clips() -> None:
    rms = RunningMeanStd((2,), clip=5.0)
    rms.update(np.array([[0.0, 10.0], [2.0, 10.0]]))
    out = rms.normalize(torch.tensor([[1.0, 10.0], [101.0, 10.0]]))
    torch.testing.assert_close(out[0], torch.zeros(2))
    assert float(out[1, 0]) == 5.0  # clipped
    torch.testing.assert_close(rms.denormalize(torch.tensor([1.0, 0.0])), torch.tensor([2.0, 10.0]))


def test_statistics_round_trip_through_state_dict() -> None:
    a = RunningMeanStd((3,))
    a.update(np.random.default_rng(1).normal(size=(50, 3)))
    b = RunningMeanStd((3,))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    assert float(b.count) == 50


class _Normalising(DatasetObsNorm):
    def __init__(self, space: gym.Space, setting: bool | None, auto: bool = True) -> None:
        super().__init__()
        self.init_obs_norm(space, setting, eps=1e-3, who="the test policy", auto=auto)


def _buffer(obs: np.ndarray) -> ReplayBuffer:
    n = len(obs)
    buf = ReplayBuffer(n)
    buf.extend(
        {
            "obs": obs, "act": np.zeros((n, 1), np.float32), "rew": np.zeros(n, np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool), "obs_next": obs,
        },
        env_ids=[0] * n,
    )  # fmt: skip
    return buf


def test_dataset_statistics_are_fitted_once_and_kept_by_a_checkpoint() -> None:
    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    data = np.random.default_rng(0).normal([1.0, -5.0, 40.0], [0.5, 2.0, 9.0], (500, 3))
    policy = _Normalising(space, None)  # None: on for a vector Box
    obs = torch.as_tensor(data[:8], dtype=torch.float32)
    assert torch.equal(policy.normalize_obs(obs), obs)  # the identity until fitted
    policy.fit_obs_norm_once(_buffer(data.astype(np.float32)))
    expected = (data[:8] - data.mean(0)) / (data.std(0) + 1e-3)
    torch.testing.assert_close(policy.normalize_obs(obs), torch.as_tensor(expected).float())
    assert float(policy.obs_count) == 500
    # fitted statistics stay when another buffer comes, and travel with the weights
    policy.fit_obs_norm_once(_buffer(np.zeros((10, 3), np.float32)))
    assert float(policy.obs_count) == 500
    fresh = _Normalising(space, None)
    fresh.load_state_dict(policy.state_dict())
    fresh.fit_obs_norm_once(_buffer(np.zeros((10, 3), np.float32)))  # loaded: not refitted
    torch.testing.assert_close(fresh.normalize_obs(obs), policy.normalize_obs(obs))


def test_dataset_statistics_refuse_what_they_cannot_normalise() -> None:
    pixels = gym.spaces.Box(0, 255, (16, 16, 1), np.uint8)
    with pytest.raises(ConfigError, match=r"set algo\.obs_norm=false$"):
        _Normalising(pixels, True, auto=False)  # a config that takes no None
    with pytest.raises(ConfigError, match=r"=false \(or leave it out: on for vector obs"):
        _Normalising(pixels, True)
    assert not _Normalising(pixels, None).obs_norm  # None: off for images
    vector = _Normalising(gym.spaces.Box(-1, 1, (2,), np.float32), True)
    with pytest.raises(ConfigError, match=r"the test policy normalises .* buffer is empty"):
        vector.fit_obs_norm(ReplayBuffer(4))
