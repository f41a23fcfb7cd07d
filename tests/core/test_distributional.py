"""The value-based toolkit: categorical projection, quantile Huber loss, cosine features,
fraction proposals, noisy layers and the distributional Q-networks — each checked against a
plain reference or a property that a wrong implementation breaks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlblocks.algo import (
    categorical_projection,
    cosine_features,
    fraction_loss,
    quantile_huber_loss,
    quantile_midpoints,
)
from rlblocks.algo.nets import (
    AtomQNetwork,
    FractionProposal,
    ImplicitQuantileNetwork,
    NoisyLinear,
    noisy_mlp,
    reset_noise,
)


def _project_reference(probs, partial, discount, support):
    """The C51 paper's algorithm 1, one atom at a time."""
    n = len(support)
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (n - 1)
    out = np.zeros_like(probs)
    for b in range(probs.shape[0]):
        for j in range(n):
            tz = min(max(partial[b] + discount[b] * support[j], v_min), v_max)
            pos = (tz - v_min) / delta
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            if lo == hi:
                out[b, lo] += probs[b, j]
            else:
                out[b, lo] += probs[b, j] * (hi - pos)
                out[b, hi] += probs[b, j] * (pos - lo)
    return out


def test_categorical_projection_matches_the_papers_algorithm() -> None:
    rng = np.random.default_rng(0)
    support = np.linspace(-10, 10, 11)
    probs = rng.dirichlet(np.ones(11), size=6)
    partial = np.array([0.0, 1.3, -4.2, 25.0, -25.0, 0.7])
    discount = np.array([1.0, 0.9, 0.99, 0.5, 0.0, 0.0])
    got = categorical_projection(
        torch.tensor(probs), torch.tensor(partial), torch.tensor(discount), torch.tensor(support)
    ).numpy()
    np.testing.assert_allclose(got, _project_reference(probs, partial, discount, support),
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    # identity, a terminal step at 0.7 (between atoms 5 and 6), clipping at v_max
    np.testing.assert_allclose(got[0], probs[0], atol=1e-12)
    assert got[5, 5] == pytest.approx(0.65) and got[5, 6] == pytest.approx(0.35)
    assert got[3, -1] == pytest.approx(1.0)


def _quantile_loss_reference(pred, target, taus, kappa):
    b, n = pred.shape
    out = np.zeros(b)
    for i in range(b):
        for j in range(n):
            for t in target[i]:
                u = t - pred[i, j]
                h = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                h = h / kappa if kappa > 0 else abs(u)
                out[i] += abs(taus[j] - (u < 0)) * h / target.shape[1]
    return out


@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.0])
def test_quantile_huber_loss_matches_a_loop(kappa: float) -> None:
    rng = np.random.default_rng(1)
    pred, target = rng.normal(size=(3, 4)) * 3, rng.normal(size=(3, 5)) * 3
    taus = quantile_midpoints(4).double().numpy()
    got = quantile_huber_loss(torch.tensor(pred), torch.tensor(target), torch.tensor(taus), kappa)
    np.testing.assert_allclose(got.numpy(), _quantile_loss_reference(pred, target, taus, kappa),
                               rtol=1e-10)  # fmt: skip


def _quantile_loss_graph(pred, target, taus, kappa, target_weights=None):
    """The loss written the plain way, for autograd to differentiate."""
    taus = taus.unsqueeze(0) if taus.dim() == 1 else taus
    u = target.unsqueeze(1) - pred.unsqueeze(2)
    if kappa > 0:
        a = u.abs()
        h = torch.where(a <= kappa, 0.5 * u.pow(2), kappa * (a - 0.5 * kappa)) / kappa
    else:
        h = u.abs()
    terms = (taus.unsqueeze(2) - (u.detach() < 0).to(u.dtype)).abs() * h
    if target_weights is None:
        return terms.mean(dim=2).sum(dim=1)
    return (terms * target_weights.unsqueeze(1)).sum(dim=(1, 2))


@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("per_row_taus", [False, True])
def test_quantile_huber_loss_gradient_in_closed_form_equals_autograd(
    kappa: float, weighted: bool, per_row_taus: bool
) -> None:
    gen = torch.Generator().manual_seed(3)
    kw = {"dtype": torch.float64, "generator": gen}
    pred = (2 * torch.randn(6, 5, **kw)).requires_grad_()
    target = 2 * torch.randn(6, 7, **kw)
    target[0, :5] = pred.detach()[0] + kappa  # |u| == kappa exactly, and u == 0 below
    target[1, :5] = pred.detach()[1]
    taus = torch.rand(6, 5, **kw) if per_row_taus else torch.rand(5, **kw)
    weights = torch.softmax(torch.randn(6, 7, **kw), dim=1) if weighted else None
    upstream = torch.randn(6, **kw)

    got = quantile_huber_loss(pred, target, taus, kappa, weights)
    assert "QuantileHuber" in type(got.grad_fn).__name__  # the one-node path was taken
    want = _quantile_loss_graph(pred, target, taus, kappa, weights)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    (g_got,) = torch.autograd.grad((got * upstream).sum(), pred)
    (g_want,) = torch.autograd.grad((want * upstream).sum(), pred)
    torch.testing.assert_close(g_got, g_want, rtol=1e-12, atol=1e-12)
    # away from the kinks (u == 0, |u| == kappa) finite differences agree too
    rows = slice(2, None)
    assert torch.autograd.gradcheck(
        lambda p: quantile_huber_loss(
            p, target[rows], taus[rows] if per_row_taus else taus, kappa,
            None if weights is None else weights[rows],
        ),
        (pred.detach()[rows].clone().requires_grad_(),),
    )  # fmt: skip


def test_quantile_huber_loss_differentiates_targets_and_fractions_when_they_need_it() -> None:
    gen = torch.Generator().manual_seed(4)
    kw = {"dtype": torch.float64, "generator": gen}
    pred = torch.randn(4, 3, **kw).requires_grad_()
    target = torch.randn(4, 5, **kw).requires_grad_()
    taus = torch.rand(4, 3, **kw).requires_grad_()
    weights = torch.softmax(torch.randn(4, 5, **kw), dim=1).requires_grad_()
    for kappa in (0.0, 1.0):
        assert torch.autograd.gradcheck(
            lambda p, t, f, w: quantile_huber_loss(p, t, f, kappa, w),  # noqa: B023
            (pred, target, taus, weights),
        )
    # without gradients anywhere it is the same number
    with torch.no_grad():
        torch.testing.assert_close(
            quantile_huber_loss(pred, target, taus, 1.0, weights),
            _quantile_loss_graph(pred, target, taus, 1.0, weights),
        )


def test_minimising_the_quantile_loss_finds_the_quantiles() -> None:
    torch.manual_seed(0)
    samples = torch.randn(1, 4000) * 2 + 5
    taus = quantile_midpoints(5)
    pred = torch.zeros(1, 5, requires_grad=True)
    opt = torch.optim.Adam([pred], lr=0.05)
    for _ in range(1500):
        opt.zero_grad()
        quantile_huber_loss(pred, samples, taus, kappa=0.0).sum().backward()
        opt.step()
    want = torch.quantile(samples[0], taus)
    torch.testing.assert_close(pred.detach()[0], want, atol=0.1, rtol=0)


def test_cosine_features_and_fraction_proposals() -> None:
    taus = torch.tensor([[0.0, 0.5, 1.0]])
    feats = cosine_features(taus, dim=3)
    torch.testing.assert_close(feats[0, 1], torch.tensor([1.0, 0.0, -1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(feats[0, 2], torch.tensor([1.0, -1.0, 1.0]), atol=1e-6, rtol=0)
    assert feats.shape == (1, 3, 3)
    torch.manual_seed(0)
    proposal = FractionProposal(8, 6)
    taus, hats, entropy = proposal(torch.randn(4, 8))
    assert taus.shape == (4, 7) and hats.shape == (4, 6) and entropy.shape == (4,)
    assert (taus[:, 0] == 0).all() and (taus[:, -1] == 1).all()
    assert (taus.diff(dim=1) > 0).all() and ((hats > taus[:, :-1]) & (hats < taus[:, 1:])).all()
    # a staircase that is already right gets no push; a wrong one moves its inner fractions
    values = torch.arange(7.0).expand(4, 7)
    zero = fraction_loss(values[:, 1:-1], (values[:, :-1] + values[:, 1:]) / 2, taus)
    assert torch.allclose(zero, torch.zeros(4))


def test_noisy_linear_uses_its_mean_in_eval_and_fresh_noise_in_training() -> None:
    torch.manual_seed(0)
    layer = NoisyLinear(4, 3, sigma0=0.5)
    x = torch.randn(2, 4)
    layer.eval()
    mean_out = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    torch.testing.assert_close(layer(x), mean_out)
    layer.train()
    first = layer(x)
    assert not torch.allclose(first, mean_out)
    torch.testing.assert_close(layer(x), first)  # the same noise until reset_noise
    reset_noise(layer)
    assert not torch.allclose(layer(x), first)
    assert torch.allclose(layer.weight_sigma, torch.full((3, 4), 0.25))  # sigma0 / sqrt(4)
    net = noisy_mlp(4, [8], 2)
    assert sum(isinstance(m, NoisyLinear) for m in net) == 2 and net.out_dim == 2


def test_atom_and_implicit_quantile_networks_shapes_and_dueling_mean() -> None:
    torch.manual_seed(0)
    net = AtomQNetwork(5, 3, 7, hidden=[16, 16], dueling=True, noisy=True)
    x = torch.randn(4, 5)
    out = net(x)
    assert out.shape == (4, 3, 7)
    # dueling: the mean over actions of Q is the value stream, atom by atom
    value = net.value(net.body(x)).view(4, 7)
    torch.testing.assert_close(out.mean(dim=1), value)
    iqn = ImplicitQuantileNetwork(5, 3, hidden=[16, 16], embedding_dim=8)
    taus = torch.rand(4, 6)
    q = iqn(torch.randn(4, 5), taus)
    assert q.shape == (4, 6, 3)
    feats = iqn.features(torch.randn(2, 5))
    a = iqn.quantiles(feats, torch.full((2, 1), 0.2))
    b = iqn.quantiles(feats, torch.full((2, 1), 0.9))
    assert not torch.allclose(a, b)  # the fraction reaches the output
