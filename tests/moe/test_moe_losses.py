"""Load-balancing losses (dgmoe.moe.losses; Shazeer et al. 2017 eqs. 6-10, GMoE App. C.4) against hand
computation, their router gradients; MoGE's linear CKA (eq. 2)."""
import math

import numpy as np
import pytest
import torch
from moe_layers import make_layer

from dgmoe.moe import aux_losses
from dgmoe.moe.losses import cka_diversity_loss, importance_loss, linear_cka, load_loss


def _phi(z):
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_importance_and_load_losses_match_hand_computation():
    clean = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    noisy = torch.tensor([[1.2, -0.1, -0.9], [0.4, 0.7, 0.1]])
    probs = noisy.softmax(-1)
    imp = probs.sum(0).tolist()
    mean = sum(imp) / 3
    var = sum((v - mean) ** 2 for v in imp) / 3
    assert importance_loss(probs).item() == pytest.approx(var / mean**2, rel=1e-5)
    sigma, k = 1 / 3, 2
    load = [0.0, 0.0, 0.0]
    for t in range(2):
        eta = sorted(noisy[t].tolist(), reverse=True)[k - 1]
        for e in range(3):
            load[e] += 1 - _phi((eta - clean[t, e].item()) / sigma)
    mean = sum(load) / 3
    var = sum((v - mean) ** 2 for v in load) / 3
    assert load_loss(clean, noisy, k, sigma).item() == pytest.approx(var / mean**2, rel=1e-5)


@pytest.mark.parametrize("router", ["cosine", "linear"])
def test_aux_loss_has_nonzero_router_gradients(router):
    layer = make_layer(router=router)
    layer.train()
    layer(torch.randn(4, 6, 8))
    sum(aux_losses(layer).values()).backward()
    grads = [p.grad for n, p in layer.named_parameters() if n.startswith("router.")]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


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
