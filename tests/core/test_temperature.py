"""The shared entropy temperature of SAC, REDQ and discrete SAC."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
from rlblocks.algo import EntropyTemperature, OptimizerStep

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class _Owner(nn.Module):
    """The least a policy offers the temperature: submodules and ``add_optimizer``."""

    def __init__(self, temperature: EntropyTemperature) -> None:
        super().__init__()
        self.temperature = temperature
        self.optimizers: dict[str, OptimizerStep] = {}

    def add_optimizer(self, name: str, step: OptimizerStep) -> OptimizerStep:
        self.optimizers[name] = step
        return step


def test_a_fixed_temperature_reads_back_exactly_and_never_moves() -> None:
    t = EntropyTemperature(0.2, target_entropy=-2.0, tune=False)
    owner = _Owner(t)
    assert t.attach(owner, lr=1.0) is None and owner.optimizers == {}
    t.update(torch.full((8,), 100.0))
    assert t.alpha.item() == torch.tensor(0.2).item()
    assert not t.log_alpha.requires_grad


@pytest.mark.parametrize(("entropy", "direction"), [(-10.0, 1), (10.0, -1)])
def test_a_tuned_temperature_rises_below_the_target_entropy_and_falls_above(
    entropy: float, direction: int
) -> None:
    t = EntropyTemperature(0.5, target_entropy=0.0, tune=True)
    owner = _Owner(t)
    step = t.attach(owner, lr=0.05)
    assert owner.optimizers == {"alpha": step}
    for _ in range(20):
        t.update(torch.full((8,), entropy))
    assert (t.alpha.item() - 0.5) * direction > 0.05
    assert not t.alpha.requires_grad


def test_its_gradient_is_that_of_the_written_loss() -> None:
    t = EntropyTemperature(0.3, target_entropy=-1.5, tune=True)
    entropy = torch.tensor([0.1, -2.0, 3.0, 0.7])
    (t.log_alpha * (entropy - t.target_entropy)).mean().backward()
    autograd = t.log_alpha.grad.clone()
    t.log_alpha.grad = None
    step = t.attach(_Owner(t), lr=0.0)
    t.update(entropy)
    assert step is not None
    torch.testing.assert_close(t.log_alpha.grad, autograd)


def test_misuse_is_named() -> None:
    with pytest.raises(ValueError, match="positive"):
        EntropyTemperature(0.0, target_entropy=-1.0, tune=True)
    t = EntropyTemperature(0.1, target_entropy=-1.0, tune=True)
    with pytest.raises(RuntimeError, match="attach"):
        t.update(torch.zeros(4))
    with pytest.raises(RuntimeError, match="submodule"):
        t.attach(_Owner(EntropyTemperature(0.1, target_entropy=-1.0, tune=True)), lr=1e-3)
    owner = _Owner(t)
    t.attach(owner, lr=1e-3)
    with pytest.raises(RuntimeError, match="already"):
        t.attach(owner, lr=1e-3)


@pytest.mark.parametrize(
    ("algo", "action_space"),
    [("sac", BOX), ("redq", BOX), ("discrete-sac", gym.spaces.Discrete(3))],
)
def test_state_dicts_that_kept_log_alpha_on_the_policy_still_load(algo, action_space) -> None:
    saved = rlblocks.make_policy(algo, OBS, action_space, auto_alpha=True, alpha=0.37)
    state = saved.state_dict()
    state["log_alpha"] = state.pop("temperature.log_alpha")  # the 0.1.0 layout
    fresh = rlblocks.make_policy(algo, OBS, action_space, auto_alpha=True, alpha=0.05)
    fresh.load_state_dict(state)
    assert fresh.alpha.item() == pytest.approx(0.37)
    assert "alpha" in fresh.optim_steps
