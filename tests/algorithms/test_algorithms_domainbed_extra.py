"""Known answers for ANDMask, SANDMask, IGA, SD, SelfReg, MTL, CausIRL_CORAL/MMD, EQRM, IB_ERM and IB_IRM:
their penalties as pure functions, and one update of each on a tiny linear network against a hand computation.
(Weights after 3 updates against DomainBed's code: tests/parity; 2 processes against 1:
tests/engine/test_engine_distributed.py; every backbone: tests/algorithms/test_algorithms_train.py.)"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms import get_algorithm
from dgmoe.algorithms.andmask import and_mask, rescaled, sand_mask, without_rounding_noise
from dgmoe.algorithms.base import Algorithm
from dgmoe.algorithms.causirl import random_cut
from dgmoe.algorithms.eqrm import kde_quantile, normal_cdf
from dgmoe.algorithms.ib import feature_variance
from dgmoe.algorithms.iga import flat_gradient, gradient_variance_penalty
from dgmoe.algorithms.sd import spectral_decoupling_penalty
from dgmoe.algorithms.selfreg import FEATURE_WEIGHT, in_class_permutations, projection_layer, selfreg_regularisers
from dgmoe.data.base import Batch
from dgmoe.engine.hparams import default_hparams

MINE = ["ANDMask", "SANDMask", "IGA", "SD", "SelfReg", "MTL", "CausIRL_CORAL", "CausIRL_MMD", "EQRM", "IB_ERM",
        "IB_IRM"]
DIM, CLASSES = 4, 3


class TinyNet(nn.Module):
    """A linear featurizer and head behind the backbone contract."""

    uses_metadata = False
    num_features = DIM

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.body, self.head = nn.Linear(5, DIM), nn.Linear(DIM, CLASSES)

    def forward_features(self, x):
        return self.body(x)

    def forward_head(self, z, pre_logits=False):
        return z if pre_logits else self.head(z)

    def get_classifier(self):
        return self.head


def batches(seed=0, n=3, size=6):
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(size, 5, generator=g) + d, torch.randint(0, CLASSES, (size,), generator=g))
            for d in range(n)]


def build(name, num_domains=3, **hp):
    params = {**default_hparams(name, "PACS"), "lr": 1e-2, "weight_decay": 0.0, **hp}
    return get_algorithm(name)(TinyNet(), CLASSES, num_domains, params)


def gradient_at_step(alg, minibatches):
    """The gradients the optimiser steps with (ANDMask/SANDMask step it directly)."""
    seen = {}
    step = alg.optimizer.step

    def spy(*a, **k):
        seen.update({n: p.grad.clone() for n, p in alg.network.named_parameters() if p.grad is not None})
        return step(*a, **k)

    alg.optimizer.step = spy
    alg.update(minibatches, 0)
    return seen


# ----- AND-mask / SAND-mask -------------------------------------------------------------------------------
def test_and_mask_keeps_entries_whose_signs_agree_and_rescales():
    grads = torch.tensor([[1.0, -1.0, 2.0, 0.5], [3.0, 1.0, 2.0, -0.5], [2.0, -1.0, 2.0, 0.5]])
    assert and_mask(grads, 1.0).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert and_mask(grads, 0.3).tolist() == [1.0, 1.0, 1.0, 1.0]  # |mean sign| = 1/3 >= 0.3
    # mean gradient masked, divided by the kept fraction (1/2)
    assert rescaled(and_mask(grads, 1.0), grads).tolist() == pytest.approx([4.0, 0.0, 4.0, 0.0])


def test_sand_mask_known_values():
    grads = torch.tensor([[1.0, 1.0, 1.0], [3.0, 1.0, -1.0]])  # variances 2, 0, 2; |mean sign| 1, 1, 0
    mask = sand_mask(grads, tau=0.5, k=2.0)
    assert mask[0].item() == pytest.approx(math.tanh(2.0 * 0.5 / 2.0))
    assert mask[1].item() == 1.0  # zero variance: tanh(+inf)
    assert mask[2].item() == 0.0  # disagreement: tanh < 0, clipped
    assert sand_mask(grads, tau=1.0, k=2.0)[1].item() == pytest.approx(1e-17)  # 0 * inf: NaN, set to 1e-17 as DomainBed
    assert sand_mask(grads[:1], tau=0.5, k=1.0).tolist() == pytest.approx([1.0] * 3)  # one domain: NaN variance


def test_rounding_noise_cannot_decide_the_mask():
    grads = torch.tensor([[1.0, 1e-9, 0.5], [2.0, -1e-9, 0.5]])
    assert without_rounding_noise(grads).tolist() == [[1.0, 0.0, 0.5], [2.0, 0.0, 0.5]]
    assert without_rounding_noise(grads.double()).tolist() == grads.double().tolist()  # above float64's floor


@pytest.mark.parametrize("name", ["ANDMask", "SANDMask"])
def test_masking_update_steps_with_the_masked_mean_of_the_domain_gradients(name):
    alg = build(name, tau=0.5, k=0.1)
    mbs = batches()
    expected, masks = {}, []
    for n, p in alg.network.named_parameters():
        grads = without_rounding_noise(torch.stack([
            torch.autograd.grad(F.cross_entropy(alg.network.head(alg.network.body(b.x)), b.y), p)[0] for b in mbs]))
        mask = and_mask(grads, 0.5) if name == "ANDMask" else sand_mask(grads, 0.5, 0.1)
        expected[n] = rescaled(mask, grads)
        masks.append(mask.flatten())
    got = gradient_at_step(alg, mbs)
    assert set(got) == set(expected)
    for n in expected:
        assert torch.allclose(got[n], expected[n], atol=1e-6), n
    masks = torch.cat(masks)  # entries kept, dropped and (SAND-mask) partly kept
    assert (masks == 0).any() and (masks > 0).any()
    assert name == "ANDMask" or ((masks > 0.01) & (masks < 0.99)).any()


# ----- IGA ------------------------------------------------------------------------------------------------
def test_iga_penalty_is_the_summed_squared_deviation_and_its_gradient_ignores_the_detached_mean():
    g = torch.tensor([[1.0, 2.0], [3.0, 2.0], [2.0, 5.0]], requires_grad=True)
    penalty = gradient_variance_penalty(g)
    assert penalty.item() == pytest.approx(1 + 1 + 1 + 1 + 0 + 4)  # column means (2, 3)
    (mine,) = torch.autograd.grad(penalty, g)
    (full,) = torch.autograd.grad((g - g.mean(0)).pow(2).sum(), g)  # the mean differentiated too
    assert torch.allclose(mine, full)


def test_iga_update_adds_the_penalty_on_the_domains_gradients():
    mbs = batches(1)
    alg = build("IGA", penalty=10.0)
    params = list(alg.network.parameters())
    losses = [F.cross_entropy(alg.network.head(alg.network.body(b.x)), b.y) for b in mbs]
    grads = torch.stack([flat_gradient(loss, params) for loss in losses])
    objective = torch.stack(losses).mean() + 10.0 * (grads - grads.mean(0)).pow(2).sum()
    expected = torch.autograd.grad(objective, params)
    out = alg.update(mbs, 0)
    assert out["penalty"] == pytest.approx((grads - grads.mean(0)).pow(2).sum().item(), rel=1e-5)
    fresh = build("IGA", penalty=10.0)
    got = gradient_at_step(fresh, mbs)
    for (n, _), e in zip(alg.network.named_parameters(), expected):
        assert torch.allclose(got[n], e, rtol=1e-5, atol=1e-7), n


# ----- SD / IB --------------------------------------------------------------------------------------------
def test_spectral_decoupling_penalty_is_the_mean_squared_logit():
    assert spectral_decoupling_penalty(torch.tensor([[1.0, -2.0], [0.0, 3.0]])).item() == pytest.approx(14 / 4)


def test_sd_objective():
    mbs = batches(2)
    alg = build("SD", sd_reg=0.5)
    logits = alg.network.head(alg.network.body(torch.cat([b.x for b in mbs])))
    y = torch.cat([b.y for b in mbs])
    out = alg.update(mbs, 0)
    assert out["loss"] == pytest.approx((F.cross_entropy(logits, y) + 0.5 * logits.pow(2).mean()).item(), rel=1e-6)


def test_feature_variance_is_the_mean_unbiased_variance():
    z = torch.tensor([[0.0, 1.0], [2.0, 1.0], [4.0, 4.0]])
    assert feature_variance(z).item() == pytest.approx((4.0 + 3.0) / 2)


@pytest.mark.parametrize("name", ["IB_ERM", "IB_IRM"])
def test_ib_penalty_switches_on_after_the_warm_up_with_an_adam_reset(name):
    alg = build(name, ib_lambda=7.0, ib_penalty_anneal_iters=1, irm_penalty_anneal_iters=1, irm_lambda=3.0)
    first = alg.update(batches(0), 0)
    assert first["loss"] == pytest.approx(first["nll"] + first.get("IRM_penalty", 0.0), rel=1e-6)  # weights 0 and 1
    assert alg.optimizer.state
    mbs = batches(1)
    z = alg.network.body(torch.cat([b.x for b in mbs]))
    ib = torch.stack([feature_variance(part) for part in z.split(6)]).mean()
    state_before = {id(p): s["step"].item() for p, s in alg.optimizer.state.items()}
    second = alg.update(mbs, 1)
    assert second["IB_penalty"] == pytest.approx(ib.item(), rel=1e-6)
    extra = 3.0 * second["IRM_penalty"] if name == "IB_IRM" else 0.0
    assert second["loss"] == pytest.approx(second["nll"] + 7.0 * second["IB_penalty"] + extra, rel=1e-6)
    assert set(state_before.values()) == {1} and {s["step"].item() for s in alg.optimizer.state.values()} == {1}


# ----- SelfReg --------------------------------------------------------------------------------------------
def test_in_class_permutations_pair_samples_of_the_same_class():
    torch.manual_seed(0)
    y = torch.tensor([0, 0, 0, 1, 2, 2, 2, 2])
    for perm in in_class_permutations(y):
        assert sorted(perm.tolist()) == list(range(8)) and torch.equal(y[perm], y)
    torch.manual_seed(0)
    a = [torch.randperm(3), torch.randperm(3), torch.randperm(1), torch.randperm(1), torch.randperm(4) + 4]
    torch.manual_seed(0)
    first, second = in_class_permutations(y)
    assert first.tolist() == a[0].tolist() + [3] + a[4].tolist() and second[:3].tolist() == a[1].tolist()


def test_selfreg_regularisers_known_values():
    logits = torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    feats = torch.tensor([[1.0], [2.0]])
    projected = torch.tensor([[0.0], [4.0]])
    swap, same = torch.tensor([1, 0]), torch.tensor([0, 1])
    individual, heterogeneous = selfreg_regularisers(logits, feats, projected, swap, same, lam=0.25)
    assert individual.item() == pytest.approx(4.0 + FEATURE_WEIGHT * (9 + 4) / 2)
    # mix = 0.25 * partner + 0.75 * self: logits off by 0.25 * 2, features by |f - (0.25 p_j + 0.75 p_i)|
    hetero_feat = ((1 - (0.25 * 4 + 0)) ** 2 + (2 - (0 + 0.75 * 4)) ** 2) / 2
    assert heterogeneous.item() == pytest.approx(0.25 + FEATURE_WEIGHT * hetero_feat)
    assert [m.out_features for m in projection_layer(8) if isinstance(m, nn.Linear)] == [16, 16, 8]
    assert [m.out_features for m in projection_layer(2048) if isinstance(m, nn.Linear)] == [2048, 2048, 2048]


def test_selfreg_projection_is_frozen_but_its_batch_statistics_move():
    alg = build("SelfReg")
    weights = [p.clone() for p in alg.cdpl.parameters()]
    stats = alg.cdpl[1].running_mean.clone()
    alg.update(batches(), 0)
    assert all(torch.equal(a, b) for a, b in zip(weights, alg.cdpl.parameters()))
    assert not torch.equal(stats, alg.cdpl[1].running_mean)
    assert not any(p is q for p in alg.cdpl.parameters() for g in alg.optimizer.param_groups for q in g["params"])


# ----- MTL ------------------------------------------------------------------------------------------------
def test_mtl_embeddings_follow_the_moving_average_and_predict_uses_the_batch_mean():
    alg = build("MTL", mtl_ema=0.75, mtl_embedding="features")  # the paper's embedding, dgmoe's named variant
    alg.embeddings[1] = torch.ones(DIM)
    z = torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0]])
    emb = alg.embedding(z, domain=1)
    expected = 0.75 * torch.tensor([2.0, 2.0, 2.0, 2.0]) + 0.25
    assert torch.allclose(emb, expected.expand(2, -1)) and torch.allclose(alg.embeddings[1], expected)
    x = batches()[0].x
    with torch.no_grad():
        f = alg.network.body(x)
        logits = alg.mtl_classifier(torch.cat([f, f.mean(0).expand(len(x), -1)], 1))
        assert torch.allclose(alg.eval().predict(x), logits)
    assert alg.mtl_classifier.in_features == 2 * DIM
    in_optimizer = {id(p) for g in alg.optimizer.param_groups for p in g["params"]}
    assert id(alg.network.head.weight) not in in_optimizer and id(alg.mtl_classifier.weight) in in_optimizer


def test_mtl_noise_embedding_reproduces_domainbed_and_sums_the_domain_losses():
    alg = build("MTL", mtl_ema=1.0)  # the default: DomainBed's noise embedding
    assert alg.hparams["mtl_embedding"] == "noise"
    mbs = batches()
    torch.manual_seed(5)
    expected = 0.0
    with torch.no_grad():
        for b in mbs:
            f = alg.network.body(b.x)
            logits = alg.mtl_classifier(torch.cat([f, torch.empty_like(f).normal_()], 1))
            expected += F.cross_entropy(logits, b.y).item()
    torch.manual_seed(5)
    out = alg.update(mbs, 0)
    assert out["loss_task"] == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="mtl_embedding"):
        build("MTL", mtl_embedding="nope")


# ----- CausIRL --------------------------------------------------------------------------------------------
def test_causirl_cuts_every_domain_at_a_numpy_draw():
    feats = [torch.arange(4.0)[:, None] + 10 * d for d in range(3)]
    np.random.seed(3)
    cuts = [np.random.randint(0, 4) for _ in range(3)]
    np.random.seed(3)
    first, second = random_cut(feats)
    assert first[:, 0].tolist() == [v + 10 * d for d, c in enumerate(cuts) for v in range(c)]
    assert second[:, 0].tolist() == [v + 10 * d for d, c in enumerate(cuts) for v in range(c, 4)]


@pytest.mark.parametrize("name", ["CausIRL_CORAL", "CausIRL_MMD"])
def test_causirl_objective_is_task_plus_the_distance_of_the_two_mixtures(name):
    from dgmoe.algorithms.coral import coral_penalty
    from dgmoe.algorithms.mmd import mmd_penalty

    # exact self-distances: DomainBed's (the default) are rounding noise that exp(-1000 d) turns into ~1e-5 of
    # the penalty, which differs between these per-domain forwards and the update's pooled one
    exact = {} if name == "CausIRL_CORAL" else {"kernel_self_distance": "zero"}
    alg = build(name, mmd_gamma=2.0, **exact)
    mbs = batches(4)
    with torch.no_grad():
        feats = [alg.network.body(b.x) for b in mbs]
        task = np.mean([F.cross_entropy(alg.network.head(f), b.y).item() for f, b in zip(feats, mbs)])
    np.random.seed(8)
    first, second = random_cut(feats)
    distance = coral_penalty(first, second) if name == "CausIRL_CORAL" else mmd_penalty(first, second,
                                                                                         self_distance="zero")
    np.random.seed(8)
    out = alg.update(mbs, 0)
    assert out["penalty"] == pytest.approx(distance.item(), rel=1e-5) and out["penalty"] > 0
    assert out["loss"] == pytest.approx(task + 2.0 * distance.item(), rel=1e-5)


# ----- EQRM -----------------------------------------------------------------------------------------------
def test_kde_quantile_inverts_the_kernel_density_cdf():
    risks = torch.tensor([0.3, 1.2, 0.7, 2.0], dtype=torch.float64)
    bandwidth = 1.06 * risks.std() * 4 ** -0.2
    for alpha in (0.5, 0.75, 0.99):
        q = kde_quantile(risks, alpha)
        assert normal_cdf(q, risks, bandwidth).mean().item() == pytest.approx(alpha, abs=1e-8)
    symmetric = torch.tensor([1.0, 2.0, 3.0])
    assert kde_quantile(symmetric, 0.5).item() == pytest.approx(2.0, abs=1e-8)


def test_kde_quantile_gradient_flows_through_the_extremes_and_the_bandwidth():
    risks = torch.tensor([0.3, 1.2, 0.7, 2.0], requires_grad=True)
    (grad,) = torch.autograd.grad(kde_quantile(risks, 0.75), risks)
    assert grad.sum().item() == pytest.approx(1.0, abs=1e-6)  # shifting every risk shifts the quantile
    assert grad.dtype == torch.float32 and (grad != 0).all()


def test_eqrm_burns_in_on_the_mean_risk_then_minimises_the_quantile_with_eqrm_lr():
    alg = build("EQRM", eqrm_burnin_iters=1, eqrm_lr=1e-4, eqrm_quantile=0.9)
    first = alg.update(batches(0), 0)
    assert first["loss_task"] == pytest.approx(first["mean_risk"])
    mbs = batches(1)
    with torch.no_grad():
        risks = torch.stack([F.cross_entropy(alg.network.head(alg.network.body(b.x)), b.y) for b in mbs])
    second = alg.update(mbs, 1)
    assert second["loss_task"] == pytest.approx(kde_quantile(risks, 0.9).item(), rel=1e-6)
    assert second["loss_task"] > risks.max().item()  # the 0.9-quantile of a KDE lies beyond its largest risk here
    assert [g["lr"] for g in alg.optimizer.param_groups] == [1e-4]


# ----- all of them ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MINE)
def test_moe_aux_loss_is_added_exactly_once(name, monkeypatch):
    calls = []
    original = Algorithm.moe_aux_loss

    def counting(self, network=None):
        calls.append(1)
        return original(self, network)

    monkeypatch.setattr(Algorithm, "moe_aux_loss", counting)
    alg = build(name)
    out = alg.update(batches(), 0)
    assert len(calls) == 1 and "loss_aux" in out


@pytest.mark.parametrize("name", ["SD", "SelfReg", "MTL", "IB_ERM"])
def test_single_source_algorithms_train_on_one_domain(name):
    alg = build(name, num_domains=1)
    assert math.isfinite(alg.update(batches(n=1), 0)["loss"])


def test_twice_differentiable_moe_forward_for_iga():
    from dgmoe.moe.config import MoEConfig
    from dgmoe.moe.dispatch import twice_differentiable
    from dgmoe.moe.layer import MoEMlp

    torch.manual_seed(0)
    layer, x = MoEMlp(8, 16, MoEConfig(num_experts=4, router_dim=8)), torch.randn(10, 8)

    def second_order():
        (g,) = torch.autograd.grad(layer(x).pow(2).sum(), [layer.experts.fc1_weight], create_graph=True)
        g.pow(2).sum().backward()

    with pytest.raises(RuntimeError, match="once_differentiable"):
        second_order()  # the fused expert FFN
    with twice_differentiable():
        second_order()
    assert layer.experts.fc1_weight.grad is not None
