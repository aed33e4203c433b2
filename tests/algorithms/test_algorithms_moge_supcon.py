"""MoGE's cross-domain supervised contrast (eq. 3, `dgmoe.algorithms.moge.cross_domain_supcon`) against a
brute-force loop, its excluded anchors and extreme inputs."""
from __future__ import annotations

import math

import pytest
import torch

from dgmoe.algorithms.moge import cross_domain_supcon


def _brute_force_supcon(q, y, d, tau):
    q = torch.nn.functional.normalize(q.double(), dim=1)
    total, count = 0.0, 0
    for i in range(len(y)):
        pos = [j for j in range(len(y)) if y[j] == y[i] and d[j] != d[i]]
        neg = [j for j in range(len(y)) if y[j] != y[i] and d[j] == d[i]]
        if not pos or not neg:
            continue
        num = sum(math.exp(float(q[i] @ q[j]) / tau) for j in pos)
        den = sum(math.exp(float(q[i] @ q[j]) / tau) for j in pos + neg)
        total += -(math.log(num) - math.log(den))
        count += 1
    return total / count if count else 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_supcon_matches_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(24, 6, generator=g)
    y = torch.randint(0, 3, (24,), generator=g)
    d = torch.randint(0, 4, (24,), generator=g)
    for tau in (0.07, 0.5):
        assert cross_domain_supcon(q, y, d, tau).item() == pytest.approx(_brute_force_supcon(q, y, d, tau), rel=1e-5)


def test_supcon_identical_features_and_excluded_anchors():
    q = torch.ones(4, 3)
    y = torch.tensor([0, 0, 1, 1])
    d = torch.tensor([0, 1, 0, 1])
    # each anchor: |P| = 1 (same class, other domain), |N| = 1 (other class, same domain) -> log 2
    assert cross_domain_supcon(q, y, d).item() == pytest.approx(math.log(2), abs=1e-6)
    # sample 4 (class 0, alone in domain 2) has positives but no negative -> not an anchor; it still is a
    # positive of anchors 0 and 1: their loss is -log(2/3), anchors 2 and 3 keep log 2
    y5, d5 = torch.tensor([0, 0, 1, 1, 0]), torch.tensor([0, 1, 0, 1, 2])
    expected = (2 * math.log(3 / 2) + 2 * math.log(2)) / 4
    assert cross_domain_supcon(torch.ones(5, 3), y5, d5).item() == pytest.approx(expected, abs=1e-6)


def test_supcon_without_valid_anchor_is_zero_with_gradient():
    q = torch.randn(5, 4, requires_grad=True)
    loss = cross_domain_supcon(q, torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long))
    assert loss.item() == 0.0
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_supcon_extreme_inputs_are_finite():
    q = (torch.randn(32, 8) * 1e4).half().requires_grad_()
    y, d = torch.arange(32) % 4, (torch.arange(32) // 4) % 3
    loss = cross_domain_supcon(q, y, d, temperature=0.01)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad.float()).all()
    g = torch.Generator().manual_seed(0)
    sub = cross_domain_supcon(q.detach().float(), y, d, max_anchors=3, generator=g)
    assert torch.isfinite(sub)
