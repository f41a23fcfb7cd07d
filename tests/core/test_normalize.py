"""RunningMeanStd: merged statistics equal those of all data at once, and travel in state_dict."""

from __future__ import annotations

import numpy as np
import torch

from rlblocks.algo import RunningMeanStd


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
