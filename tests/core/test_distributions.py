"""Action distributions agree with torch.distributions on log-probs, entropy and KL."""

from __future__ import annotations

import torch
from torch import distributions as D

from rlblocks.algo import Categorical, DiagGaussian, MultiCategorical


def test_categorical_matches_torch_log_prob_entropy_and_kl() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(6, 4), torch.randn(6, 4)
    act = torch.randint(4, (6,))
    p, q = Categorical(a), Categorical(b)
    ref_p, ref_q = D.Categorical(logits=a), D.Categorical(logits=b)
    torch.testing.assert_close(p.log_prob(act), ref_p.log_prob(act))
    torch.testing.assert_close(p.entropy(), ref_p.entropy())
    torch.testing.assert_close(p.kl(q), D.kl_divergence(ref_p, ref_q))


def test_categorical_samples_follow_the_probabilities() -> None:
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]])).expand(20_000, 3)
    counts = torch.bincount(Categorical(logits).sample(), minlength=3).float() / 20_000
    torch.testing.assert_close(counts, torch.tensor([0.1, 0.6, 0.3]), atol=0.015, rtol=0)


def test_diag_gaussian_matches_torch_independent_normal() -> None:
    torch.manual_seed(0)
    m1, m2 = torch.randn(5, 3), torch.randn(5, 3)
    s1, s2 = torch.randn(3) * 0.3, torch.randn(3) * 0.3
    p, q = DiagGaussian(m1, s1), DiagGaussian(m2, s2)
    ref_p = D.Independent(D.Normal(m1, s1.exp().expand_as(m1)), 1)
    ref_q = D.Independent(D.Normal(m2, s2.exp().expand_as(m2)), 1)
    act = torch.randn(5, 3)
    torch.testing.assert_close(p.log_prob(act), ref_p.log_prob(act))
    torch.testing.assert_close(p.entropy(), ref_p.entropy())
    torch.testing.assert_close(p.kl(q), D.kl_divergence(ref_p, ref_q))
    assert torch.equal(p.mode(), m1)


def test_multi_categorical_sums_its_parts() -> None:
    torch.manual_seed(0)
    nvec = (3, 2)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    p, q = MultiCategorical(a, nvec), MultiCategorical(b, nvec)
    act = torch.stack([torch.randint(3, (4,)), torch.randint(2, (4,))], dim=1)
    parts_p = [D.Categorical(logits=x) for x in a.split(nvec, dim=1)]
    parts_q = [D.Categorical(logits=x) for x in b.split(nvec, dim=1)]
    torch.testing.assert_close(
        p.log_prob(act), parts_p[0].log_prob(act[:, 0]) + parts_p[1].log_prob(act[:, 1])
    )
    torch.testing.assert_close(p.entropy(), sum(x.entropy() for x in parts_p))
    torch.testing.assert_close(
        p.kl(q), sum(D.kl_divergence(x, y) for x, y in zip(parts_p, parts_q))
    )
    assert p.sample().shape == (4, 2)
