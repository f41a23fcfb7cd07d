"""FQF: proposed fractions, the two optimizers and what each moves, target quantiles, the
quantile Huber loss at the proposed midpoints, acting on the weighted mean, checkpoints, and
training to CartPole's threshold."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import quantile_huber_loss
from rlblocks.contracts import Batch
from rlblocks.run import load_checkpoint, save_checkpoint
from rlblocks_algo_fqf.config import FQFConfig
from rlblocks_algo_fqf.fqf import FQFPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def constant_policy(q: tuple[float, float], **cfg) -> FQFPolicy:
    """A policy whose online and target networks give quantile ``q[a]`` for action ``a`` at every
    fraction and observation, with evenly spaced proposed fractions (all weights zero, the last
    bias set)."""
    policy = FQFPolicy(OBS, ACT, FQFConfig(**cfg))
    with torch.no_grad():
        for net in (policy.model, policy.target_model):
            for p in net.parameters():
                p.zero_()
            last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.bias.copy_(torch.tensor(q))
    return policy


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def unchanged(module: torch.nn.Module, before: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_proposed_fractions_ascend_from_zero_to_one(random_buffer) -> None:
    torch.manual_seed(0)
    policy = FQFPolicy(OBS, ACT, FQFConfig(num_fractions=6, fraction_lr=1e-2))
    buf = random_buffer(ACT)
    for _ in range(20):  # a fast-moving proposal, so the fractions are no longer even
        policy.update(32, buf)
    obs = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (16, 3)), dtype=torch.float32)
    with torch.no_grad():
        taus, tau_hats, entropy = policy.fractions(policy.model.features(obs))
    assert taus.shape == (16, 7) and tau_hats.shape == (16, 6) and entropy.shape == (16,)
    assert torch.all(taus[:, 0] == 0.0) and torch.all(taus[:, -1] == 1.0)
    assert torch.all(taus[:, 1:] > taus[:, :-1])
    torch.testing.assert_close(tau_hats, (taus[:, 1:] + taus[:, :-1]) / 2)
    assert float((taus[:, 1:] - taus[:, :-1]).std()) > 1e-4  # the proposal moved


def test_each_optimizer_moves_only_its_own_network(monkeypatch, random_buffer) -> None:
    torch.manual_seed(0)
    policy = FQFPolicy(OBS, ACT, FQFConfig(fraction_lr=1e-3))
    proposal_ids = {id(p) for p in policy.proposal.parameters()}
    assert {id(p) for p in policy.optim_steps["fraction"].params} == proposal_ids
    assert not proposal_ids & {id(p) for p in policy.optim_steps["q"].params}
    assert any(k.startswith("proposal.") for k in policy.state_dict())
    buf = random_buffer(ACT)

    # the fraction step alone (the quantile step switched off): only the proposal moves
    model, proposal = snapshot(policy.model), snapshot(policy.proposal)
    with monkeypatch.context() as m:
        m.setattr(policy, "finish_step", lambda loss: None)
        policy.update(32, buf)
    assert unchanged(policy.model, model) and not unchanged(policy.proposal, proposal)

    # the quantile step alone: the proposal stays, the quantile network moves
    model, proposal = snapshot(policy.model), snapshot(policy.proposal)
    with monkeypatch.context() as m:
        m.setattr(policy.fraction_step, "step", lambda loss: None)
        policy.update(32, buf)
    assert unchanged(policy.proposal, proposal) and not unchanged(policy.model, model)


@pytest.mark.parametrize("n_step", [1, 3])
def test_target_quantiles_bootstrap_the_greedy_action_and_stop_at_terminal(
    n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    buf = episode_buffer([(1.0, False, False), (2.0, False, False), (4.0, True, False)])
    policy = constant_policy((3.0, 10.0), gamma=gamma, n_step=n_step, num_fractions=5)
    idx = np.array([0, 1, 2])
    target, probs = policy.target_distribution(policy.process_fn(buf[idx], buf, idx))
    assert target.shape == probs.shape == (3, 5)
    torch.testing.assert_close(probs, torch.full((3, 5), 0.2))  # zero features: even fractions
    rews = [1.0, 2.0, 4.0]
    for t in range(3):
        k = min(n_step, 3 - t)
        g = sum(gamma**j * rews[t + j] for j in range(k))
        boot = 0.0 if t + k == 3 else gamma**k * 10.0
        np.testing.assert_allclose(target[t].numpy(), np.full(5, g + boot), rtol=1e-6)


@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.5])
def test_target_samples_weigh_their_probabilities_in_the_quantile_loss(
    kappa: float, quantile_huber_reference
) -> None:
    gen = torch.Generator().manual_seed(0)
    pred, target = torch.randn(3, 4, generator=gen), 3 * torch.randn(3, 5, generator=gen)
    taus = torch.rand(3, 4, generator=gen).sort(dim=1).values
    probs = torch.softmax(torch.randn(3, 5, generator=gen), dim=1)
    got = quantile_huber_loss(pred, target, taus, kappa, target_weights=probs)
    for b in range(3):
        expected = quantile_huber_reference(
            pred[b].numpy(), target[b].numpy(), taus[b].numpy(), kappa, probs[b].numpy()
        )
        assert float(got[b]) == pytest.approx(expected, rel=1e-5)
    # equal probabilities give core's loss
    even = torch.full((3, 5), 0.2)
    torch.testing.assert_close(
        quantile_huber_loss(pred, target, taus, kappa, target_weights=even),
        quantile_huber_loss(pred, target, taus, kappa),
    )


def test_quantile_loss_is_taken_at_the_proposed_midpoints(
    episode_buffer, quantile_huber_reference
) -> None:
    gamma, kappa, n = 0.9, 1.0, 4
    buf = episode_buffer([(1.0, False, False), (-2.0, False, False), (0.5, True, False)])
    policy = constant_policy((0.0, 2.0), gamma=gamma, n_step=1, kappa=kappa, num_fractions=n)
    idx = np.array([0, 1, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    policy.learn(batch)
    # zero features: the proposal's logits are its zero bias, so the fractions are even
    tau_hats = (np.arange(n) + 0.5) / n
    expected = []
    for t, (rew, terminal) in enumerate([(1.0, False), (-2.0, False), (0.5, True)]):
        target = np.full(n, rew + (0.0 if terminal else gamma * 2.0))
        expected.append(
            quantile_huber_reference(np.full(n, [0.0, 2.0][t % 2]), target, tau_hats, 1)
        )
    np.testing.assert_allclose(batch.td_error.numpy(), expected, rtol=1e-5)


def test_acting_uses_the_fraction_weighted_mean_of_the_quantiles(random_buffer) -> None:
    torch.manual_seed(0)
    policy = FQFPolicy(OBS, gym.spaces.Discrete(3), FQFConfig(num_fractions=5, fraction_lr=1e-2))
    buf = random_buffer(gym.spaces.Discrete(3))
    for _ in range(10):
        policy.update(32, buf)
    policy.eval()
    obs = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    out = policy(Batch(obs=obs))
    with torch.no_grad():
        features = policy.model.features(torch.as_tensor(obs))
        taus, tau_hats, _ = policy.proposal(features)
        z = policy.model.quantiles(features, tau_hats)  # [4, 5, 3]
    expected = torch.stack(
        [sum((taus[b, i + 1] - taus[b, i]) * z[b, i] for i in range(5)) for b in range(4)]
    )
    torch.testing.assert_close(out.logits.detach(), expected)
    np.testing.assert_array_equal(out.act, expected.argmax(dim=1).numpy())


class PowerQuantiles(torch.nn.Module):
    """A fixed quantile function ``F^-1(tau) = scale * tau^4`` for every action (convex: the
    best staircase puts more fractions near 1), with constant state features."""

    feature_dim = 4

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(10.0))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.ones(obs.shape[0], self.feature_dim)

    def quantiles(self, features: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        return (self.scale * taus.pow(4)).unsqueeze(2).expand(-1, -1, 2)


def staircase_w1(taus: torch.Tensor) -> float:
    """The 1-Wasserstein distance between ``10 tau^4`` and its staircase at the midpoints of
    ``taus [N+1]``, integrated on a fine grid."""
    omega = torch.linspace(0, 1, 20_001, dtype=torch.float64)[:-1] + 0.5 / 20_000
    taus = taus.to(torch.float64)
    piece = torch.bucketize(omega, taus[1:-1], right=True)
    hats = (taus[:-1] + taus[1:]) / 2
    return float((10 * omega.pow(4) - 10 * hats[piece].pow(4)).abs().mean())


def test_fraction_steps_lower_the_w1_error_of_a_fixed_quantile_function(
    monkeypatch, random_buffer
) -> None:
    # the quantile function stays put, so the proposal alone must approach the best staircase
    torch.manual_seed(0)
    cfg = FQFConfig(num_fractions=8, fraction_lr=1e-2, fraction_optimizer="adam")
    policy = FQFPolicy(OBS, ACT, cfg, model=PowerQuantiles())
    monkeypatch.setattr(policy, "finish_step", lambda loss: None)
    obs = torch.zeros(1, 3)
    with torch.no_grad():
        before = staircase_w1(policy.fractions(policy.model.features(obs))[0][0])
    buf = random_buffer(ACT)
    for _ in range(100):
        policy.update(16, buf)
    with torch.no_grad():
        taus = policy.fractions(policy.model.features(obs))[0][0]
    after = staircase_w1(taus)
    assert after < 0.8 * before
    widths = taus[1:] - taus[:-1]
    assert float(widths[-1]) < float(widths[0])  # finer steps where the function is steep


def test_learning_fits_the_return_distribution_on_a_fixed_batch(episode_buffer) -> None:
    # gamma=0: the target is the reward itself, so every quantile must converge to it
    torch.manual_seed(0)
    cfg = FQFConfig(lr=1e-2, gamma=0.0, n_step=1, tau=None, target_update_interval=0)
    policy = FQFPolicy(OBS, ACT, cfg)
    buf = episode_buffer([(1.0, False, False), (0.0, False, False), (2.0, True, False)])
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(300)]
    assert losses[-1] < 0.05 * losses[0]
    with torch.no_grad():
        q = policy.q_values(torch.tensor([[0.0, 0, 0], [2.0, 0, 0]]), policy.model)
    assert float(q[0, 0]) == pytest.approx(1.0, abs=0.1)
    assert float(q[1, 0]) == pytest.approx(2.0, abs=0.1)


def test_checkpoint_round_trip_gives_identical_q_values(tmp_path: Path, random_buffer) -> None:
    torch.manual_seed(0)
    cfg = FQFConfig(num_fractions=8, fraction_lr=1e-2)
    policy = FQFPolicy(OBS, ACT, cfg)
    buf = random_buffer(ACT)
    for _ in range(5):
        policy.update(16, buf)
    save_checkpoint(tmp_path / "c.pt", {"p": policy.state_dict(), "x": policy.extra_state()})
    loaded = load_checkpoint(tmp_path / "c.pt")
    torch.manual_seed(1)
    fresh = FQFPolicy(OBS, ACT, cfg)
    fresh.load_state_dict(loaded["p"])
    fresh.load_extra_state(loaded["x"])
    obs = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (6, 3)), dtype=torch.float32)
    with torch.no_grad():
        for a, b in [(policy.model, fresh.model), (policy.target_model, fresh.target_model)]:
            torch.testing.assert_close(policy.q_values(obs, a), fresh.q_values(obs, b))
    saved = policy.optim_steps["fraction"].state_dict()["steps"]
    assert fresh.optim_steps["fraction"].steps == saved == 5


@pytest.mark.slow
def test_fqf_solves_cartpole_with_default_settings(tmp_path: Path) -> None:
    """The README's first command: `rlblocks train fqf` reaches 475 over 100 test episodes."""
    result = rlblocks.train("fqf", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
