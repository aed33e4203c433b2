"""MoGE losses: linear CKA (eq. 2), cross-domain SupCon (eq. 3) against a brute-force loop, load balance."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dgmoe.algorithms.moge import cross_domain_supcon
from dgmoe.moe.losses import cka_diversity_loss, linear_cka


def test_cka_reference_value():
    rs = np.random.RandomState(1337)  # reference notes §5.1: linear CKA 0.55761
    x = rs.randn(100, 10)
    y = rs.randn(100, 10) + x
    assert linear_cka(torch.from_numpy(x), torch.from_numpy(y)).item() == pytest.approx(0.55761, abs=5e-6)
    # the Gram form (n < d) on the transposed problem's sizes: same value through padding with zero columns
    xp = torch.cat([torch.from_numpy(x), torch.zeros(100, 200, dtype=torch.float64)], 1)
    assert linear_cka(xp, torch.from_numpy(y)).item() == pytest.approx(0.55761, abs=5e-6)


@pytest.mark.parametrize("n,d", [(50, 8), (16, 64)])
def test_cka_invariances(n, d):
    torch.manual_seed(0)
    x = torch.randn(n, d, dtype=torch.float64)
    y = torch.randn(n, d, dtype=torch.float64) + 0.5 * x
    q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))
    assert linear_cka(x, x).item() == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(x, x @ q).item() == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(x, 37.5 * x).item() == pytest.approx(1.0, abs=1e-10)
    base = linear_cka(x, y).item()
    assert 0.0 < base < 1.0
    assert linear_cka(x @ q, 3.0 * y).item() == pytest.approx(base, abs=1e-10)
    assert linear_cka(y, x).item() == pytest.approx(base, abs=1e-10)
    assert linear_cka(x + 4.0, y - 2.0).item() == pytest.approx(base, abs=1e-10)  # centring


def test_cka_diversity_is_mean_over_pairs_and_stable():
    torch.manual_seed(0)
    outs = torch.randn(4, 20, 16)
    pairs = [linear_cka(outs[i], outs[j]) for i in range(4) for j in range(i + 1, 4)]
    assert cka_diversity_loss(outs).item() == pytest.approx(torch.stack(pairs).mean().item(), abs=1e-5)
    same = outs[:1].expand(3, -1, -1)
    assert cka_diversity_loss(same).item() == pytest.approx(1.0, abs=1e-5)
    huge = (outs * 1e4).half()  # fourth powers would overflow fp16; computed in fp32 after normalising
    assert torch.isfinite(cka_diversity_loss(huge))
    collapsed = torch.zeros(3, 10, 8, requires_grad=True)
    loss = cka_diversity_loss(collapsed)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(collapsed.grad).all()


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


