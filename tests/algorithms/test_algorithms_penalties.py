"""Known-answer tests of the DG penalties (pure tensor functions)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.coral import coral_penalty, covariance
from dgmoe.algorithms.dann import class_balanced_weights, discriminator_mlp
from dgmoe.algorithms.fish import fish_meta_step
from dgmoe.algorithms.fishr import domain_grad_variances, ema_update, fishr_penalty, per_sample_grads
from dgmoe.algorithms.group_dro import group_dro_weights
from dgmoe.algorithms.irm import irm_penalty
from dgmoe.algorithms.miro import VarianceEncoder, miro_penalty
from dgmoe.algorithms.mixup import mixup_loss, random_pairs
from dgmoe.algorithms.mldg import meta_splits
from dgmoe.algorithms.mmd import KERNEL_GAMMAS, mmd_penalty, pairwise_penalty, self_distance_of, squared_distances
from dgmoe.algorithms.rdm import rdm_penalties
from dgmoe.algorithms.swad import AVERAGING, ENDED, SEARCH, LossValley
from dgmoe.algorithms.vrex import vrex_penalty


def feats(n=32, d=4, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


# ----- CORAL / MMD ------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["domainbed", "paper"])
def test_coral_zero_for_identical_batches_and_grows_with_shift(variant):
    a = feats()
    assert coral_penalty(a, a.clone(), variant).item() == pytest.approx(0.0, abs=1e-12)
    b = feats(seed=1)
    scaled = [coral_penalty(a, a * s, variant).item() for s in (1.0, 1.5, 2.0, 3.0)]
    assert scaled[0] == pytest.approx(0, abs=1e-12) and all(x < y for x, y in zip(scaled, scaled[1:]))
    assert coral_penalty(a, b, variant).item() > 0


def test_coral_hand_computed():
    a = torch.tensor([[0.0, 0.0], [2.0, 0.0]])  # mean (1, 0); cov [[2, 0], [0, 0]]
    b = torch.tensor([[1.0, 1.0], [1.0, 3.0]])  # mean (1, 2); cov [[0, 0], [0, 2]]
    assert torch.allclose(covariance(a), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    # domainbed: mean((0, -2)^2) + mean of diag(4, 4) over 4 entries = 2 + 2
    assert coral_penalty(a, b, "domainbed").item() == pytest.approx(4.0)
    assert coral_penalty(a, b, "paper").item() == pytest.approx(8.0 / 16.0)
    with pytest.raises(ValueError, match="coral_variant"):
        coral_penalty(a, b, "nope")


def test_coral_mean_shift_only_moves_mean_term():
    a = feats()
    assert coral_penalty(a, a + 1.0, "paper").item() == pytest.approx(0.0, abs=1e-10)
    assert coral_penalty(a, a + 1.0, "domainbed").item() == pytest.approx(1.0, rel=1e-5)


def test_mmd_zero_for_identical_and_grows_with_shift():
    a = feats(d=2) * 0.3
    assert mmd_penalty(a, a.clone()).item() == pytest.approx(0.0, abs=1e-6)
    vals = [mmd_penalty(a, a + s).item() for s in (0.05, 0.2, 0.5, 1.0)]
    assert all(x < y for x, y in zip(vals, vals[1:])) and vals[0] > 0
    b = feats(d=2, seed=5)
    assert mmd_penalty(a, b).item() == pytest.approx(mmd_penalty(b, a).item(), rel=1e-5)


def test_kernel_self_distances_are_domainbeds_expansion_by_default_exact_zeros_as_the_variant():
    a = feats(16, 8) * 3
    exact = torch.cdist(a.double(), a.double()).pow(2)
    default, zero = squared_distances(a, a), squared_distances(a, a, "zero")
    eps, norms = torch.finfo(torch.float32).eps, a.pow(2).sum(1)
    bound = 4 * a.shape[1] * eps * (norms[:, None] + norms[None, :])  # |a|^2 - 2 a.b + |b|^2 rounded in float32
    off = ~torch.eye(16, dtype=torch.bool)
    assert ((default.double() - exact).abs() <= bound.double())[off].all()
    assert ((zero.double() - exact).abs() <= bound.double())[off].all()
    assert torch.equal(zero.diagonal(), torch.full((16,), 1e-30))  # exact zeros (clamped as DomainBed)
    assert (default.diagonal().double() <= bound.diagonal().double()).all()  # DomainBed's: rounding residue
    assert (default.diagonal() > 1e-30).any()  # ... which is not all zero (it is what exp(-1000 d) sees)
    losses = torch.tensor([[0.3], [0.3], [1.7]])  # RDM's scalars: the variant takes plain differences
    assert squared_distances(losses, losses, "zero")[0, 1] == torch.tensor(1e-30)  # equal losses: exactly 0
    with pytest.raises(ValueError, match="kernel_self_distance"):
        self_distance_of({"kernel_self_distance": "exact"})


def test_mmd_hand_computed_single_points():
    a, b = torch.tensor([[0.0]]), torch.tensor([[1.0]])
    expected = 2 * len(KERNEL_GAMMAS) - 2 * sum(math.exp(-g) for g in KERNEL_GAMMAS)
    assert mmd_penalty(a, b).item() == pytest.approx(expected, rel=1e-6)


def test_pairwise_penalty_averages_unordered_pairs():
    xs = [torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([4.0])]
    got = pairwise_penalty(xs, lambda u, v: (u - v).abs().sum())
    assert got.item() == pytest.approx((1 + 3 + 2) / 3)


# ----- IRM --------------------------------------------------------------------------------------
def _optimal_scale(logits, y):
    s = torch.ones((), dtype=torch.float64, requires_grad=True)
    for _ in range(50):  # Newton on the 1-d convex risk CE(s * logits)
        loss = F.cross_entropy(logits.double() * s, y)
        (g,) = torch.autograd.grad(loss, s, create_graph=True)
        (h,) = torch.autograd.grad(g, s)
        with torch.no_grad():
            s -= g / h
    return s.detach().float()


def test_irm_penalty_vanishes_at_optimal_dummy_scale():
    logits, y = feats(16, 3), torch.randint(0, 3, (16,), generator=torch.Generator().manual_seed(1))
    s = _optimal_scale(logits, y)
    assert irm_penalty(logits * s, y, unbiased=False).item() == pytest.approx(0.0, abs=1e-9)
    assert irm_penalty(logits * s * 2, y, unbiased=False).item() > 1e-4
    assert irm_penalty(logits * s * 0.5, y, unbiased=False).item() > 1e-4


def test_irm_penalty_equals_analytic_gradient_products():
    logits, y = feats(10, 4), torch.randint(0, 4, (10,), generator=torch.Generator().manual_seed(2))

    def dscale(lg, yy):  # d/ds CE(s * lg) at s = 1 = mean_i (sum_c p_ic lg_ic - lg_iy)
        p = lg.softmax(-1)
        return ((p * lg).sum(-1) - lg.gather(1, yy[:, None]).squeeze(1)).mean()

    assert irm_penalty(logits, y, unbiased=False).item() == pytest.approx(dscale(logits, y).item() ** 2, rel=1e-5)
    expected = dscale(logits[::2], y[::2]) * dscale(logits[1::2], y[1::2])
    assert irm_penalty(logits, y).item() == pytest.approx(expected.item(), rel=1e-5)


# ----- VREx / GroupDRO / RDM -------------------------------------------------------------------
def test_vrex_equals_population_variance_of_risks():
    risks = torch.tensor([1.0, 2.0, 3.0])
    assert vrex_penalty(risks).item() == pytest.approx(2.0 / 3.0)
    r = torch.rand(5)
    assert vrex_penalty(r).item() == pytest.approx(torch.var(r, unbiased=False).item(), rel=1e-6)


def test_group_dro_exponentiated_gradient_step():
    q = group_dro_weights(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 2.0]), eta=1.0)
    e = math.e
    assert q.tolist() == pytest.approx([e / (e + e * e), e * e / (e + e * e)])
    assert group_dro_weights(torch.full((3,), 1 / 3), torch.ones(3), 0.1).tolist() == pytest.approx([1 / 3] * 3)


def test_rdm_penalties_vanish_when_domains_share_the_loss_distribution():
    base = torch.tensor([0.1, 0.5, 2.0, 0.7])
    risks, matching, variance = rdm_penalties(torch.cat([base, base, base]), [4, 4, 4])
    assert risks.tolist() == pytest.approx([base.mean().item()] * 3)
    assert matching.item() == pytest.approx(0.0, abs=1e-6)
    # unbiased variances: of all 12 losses plus of the worst domain's 4
    assert variance.item() == pytest.approx(torch.cat([base] * 3).var().item() + base.var().item(), rel=1e-5)
    _, shifted, _ = rdm_penalties(torch.cat([base, base, base + 1.0]), [4, 4, 4])
    assert shifted.item() > 1e-3


def test_rdm_picks_the_worst_domain():
    losses = torch.tensor([0.0, 0.0, 5.0, 5.0])
    risks, _, variance = rdm_penalties(losses, [2, 2])
    assert risks.tolist() == [0.0, 5.0]
    assert variance.item() == pytest.approx(losses.var().item() + 0.0)


# ----- Fishr -----------------------------------------------------------------------------------
def test_fishr_per_sample_grads_match_the_analytic_linear_gradients():
    lin = nn.Linear(4, 3)
    z = feats(6, 4).requires_grad_(True)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    g = per_sample_grads(lin, z, y)
    r = lin(z).softmax(-1) - F.one_hot(y, 3)
    expected = torch.cat([(r[:, :, None] * z[:, None, :]).reshape(6, -1), r], 1)
    assert torch.allclose(g, expected, atol=1e-6)
    # and they stay differentiable with respect to the features and the classifier
    (gz,) = torch.autograd.grad(g.pow(2).sum(), z)
    (ez,) = torch.autograd.grad(expected.pow(2).sum(), z)
    assert torch.allclose(gz, ez, atol=1e-5)


def test_fishr_variances_penalty_and_ema():
    grads = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0]])
    v = domain_grad_variances(grads, [2, 2])
    assert v.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert fishr_penalty(v).item() == pytest.approx(0.25)  # each entry is 0.5 from the mean
    assert fishr_penalty(torch.stack([v[0], v[0]])).item() == 0.0
    used, stored = ema_update(torch.zeros(2), torch.tensor([2.0, 4.0]), 0.9, first=True, correction=True)
    assert used.tolist() == pytest.approx([2.0, 4.0]) and stored.tolist() == pytest.approx([0.2, 0.4])
    used, stored = ema_update(stored, torch.tensor([2.0, 4.0]), 0.9, first=False, correction=False)
    assert used.tolist() == pytest.approx([0.38, 0.76]) and stored.tolist() == pytest.approx([0.38, 0.76])


# ----- MIRO / Fish / Mixup / MLDG / DANN -------------------------------------------------------
def test_miro_penalty_known_values():
    t = feats(5, 3)
    assert miro_penalty(t, torch.ones(3), t).item() == pytest.approx(0.0, abs=1e-7)
    m, v = torch.zeros(1, 2), torch.tensor([2.0, 0.5])
    tgt = torch.tensor([[2.0, 1.0]])
    expected = ((4 / 2 + math.log(2)) + (1 / 0.5 + math.log(0.5))) / 2 / 2
    assert miro_penalty(m, v, tgt).item() == pytest.approx(expected, rel=1e-6)
    assert VarianceEncoder(3)().tolist() == pytest.approx([0.1] * 3, rel=1e-5)


def test_fish_meta_step_moves_towards_the_inner_weights():
    w, inner = [torch.tensor([1.0, 2.0])], [torch.tensor([3.0, 0.0])]
    fish_meta_step(w, inner, 0.25)
    assert w[0].tolist() == [1.5, 1.5]


def test_mixup_pairs_form_a_cycle_and_loss_interpolates():
    pairs = random_pairs(4)
    assert sorted(i for i, _ in pairs) == [0, 1, 2, 3] and sorted(j for _, j in pairs) == [0, 1, 2, 3]
    assert all(i != j for i, j in pairs)
    logits = feats(3, 2)
    yi, yj = torch.tensor([0, 1, 0]), torch.tensor([1, 1, 0])
    got = mixup_loss(logits, yi, yj, 0.3).item()
    assert got == pytest.approx(0.3 * F.cross_entropy(logits, yi).item() + 0.7 * F.cross_entropy(logits, yj).item())


def test_mldg_meta_splits():
    pairs = meta_splits(3, 1)
    assert len(pairs) == 2 and len({j for _, j in pairs}) == 1
    assert {i for i, _ in pairs} | {pairs[0][1]} == {0, 1, 2}
    assert len(meta_splits(3, 2)) == 1  # DomainBed's default n_meta_test=2 with 3 training domains
    assert meta_splits(2, 2) == []  # as DomainBed: no meta-train domain left (MLDG warns at construction)


def test_dann_class_balanced_weights_and_mlp():
    w = class_balanced_weights(torch.tensor([0, 0, 1]), 2)
    assert w.tolist() == pytest.approx([0.25, 0.25, 0.5])
    # DomainBed's K is the largest label in the batch plus one, not the number of classes
    assert class_balanced_weights(torch.tensor([0, 0, 1]), 5).tolist() == pytest.approx([0.25, 0.25, 0.5])
    assert (class_balanced_weights(torch.tensor([0, 0, 1]), 5, batch_width=False).tolist()
            == pytest.approx([0.1, 0.1, 0.2]))
    mlp = discriminator_mlp(8, 3, width=16, depth=4, dropout=0.0)
    assert sum(isinstance(m, nn.Linear) for m in mlp) == 4 and mlp(torch.zeros(2, 8)).shape == (2, 3)


# ----- SWAD loss valley -------------------------------------------------------------------------
LOSSES = [5.0, 4.0, 3.0, 3.5, 3.2, 3.1, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]


def run_valley(losses, per_segment=2, valley=None, start=0):
    valley = valley or LossValley(1, n_converge=3, n_tolerance=6, tolerance_ratio=0.3)
    t = start * per_segment
    for loss in losses:
        for _ in range(per_segment):
            t += 1
            valley.add_iterate(torch.tensor([float(t)]), t)  # the "weights" at iteration t are t
        valley.end_segment(loss, t)
    return valley


def test_swad_window_follows_algorithm_1():
    v = run_valley(LOSSES[:4])
    assert int(v.phase) == SEARCH and v.average() is None
    v = run_valley(LOSSES[:5])  # checkpoint 5: E_3 = 3.0 is the min of (3.0, 3.5, 3.2) -> t_s = 3
    assert int(v.phase) == AVERAGING
    assert float(v.threshold) == pytest.approx(1.3 * (3.0 + 3.5 + 3.2) / 3)
    # checkpoints 3..5 = iterations 5..10
    assert v.average().item() == pytest.approx(sum(range(5, 11)) / 6)
    v = run_valley(LOSSES[:9])  # still in the valley: segments 3..9 = iterations 5..18
    assert int(v.phase) == AVERAGING and v.average().item() == pytest.approx(sum(range(5, 19)) / 14)
    v = run_valley(LOSSES)  # checkpoint 12: all of E_7..E_12 exceed the tolerance -> t_e = 12 - 6 = 6
    assert int(v.phase) == ENDED
    assert v.average().item() == pytest.approx(sum(range(5, 13)) / 8)  # the mean over iterations 5..12
    assert (int(v.start_step), int(v.end_step)) == (5, 12)
    v.add_iterate(torch.tensor([99.0]), 99)
    v.end_segment(0.0, 99)  # after the end nothing changes
    assert v.average().item() == pytest.approx(8.5)


def test_swad_valley_state_dict_resumes_exactly():
    first = run_valley(LOSSES[:6])
    resumed = LossValley(1, 3, 6, 0.3)
    resumed.load_state_dict(first.state_dict())
    a = run_valley(LOSSES[6:], valley=first, start=6)
    b = run_valley(LOSSES[6:], valley=resumed, start=6)
    assert a.average().item() == b.average().item() == pytest.approx(8.5)


def test_swad_rejects_bad_patience():
    with pytest.raises(ValueError, match="patience"):
        LossValley(3, n_converge=0)
