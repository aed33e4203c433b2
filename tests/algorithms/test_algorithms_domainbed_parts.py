"""The mechanisms of ARM, SagNet, RSC, CAD/CondCAD, TRM, Transfer, URM, ADRMX and ERM++, one by one, and
checkpoint resumption of their extra state (averages, heads, adversaries, discriminators)."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_algorithms_train import BACKBONES, build, load, minibatches, predictions, save, tiny, train

from dgmoe.algorithms.adrmx import remix_pairs, supcon_lambda
from dgmoe.algorithms.arm import ContextNet, GlobalBatchNorm2d, input_conv, widen_input
from dgmoe.algorithms.averaging import flatten
from dgmoe.algorithms.cad import domain_bottleneck, finite_mean
from dgmoe.algorithms.rsc import feature_mask, rsc_masks
from dgmoe.algorithms.sagnet import randomize, uniform_prediction_loss
from dgmoe.algorithms.transfer import loss_gap, project_to_ball
from dgmoe.algorithms.trm import neumann_inverse_hvp
from dgmoe.sharding import Shard, use_shard

VIT, GMOE, RESNET = BACKBONES[0], BACKBONES[1], BACKBONES[3]


def params(module):
    return [p.detach().clone() for p in module.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ----- ARM --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backbone,attr", [(VIT, "patch_embed.proj"), (RESNET, "conv1")])
def test_arm_widens_the_input_convolution_with_a_copy_of_channel_0(backbone, attr):
    net = tiny(backbone)
    net.eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        before = net(x)
    old = net.get_submodule(attr).weight.detach().clone()
    widen_input(net)
    conv = net.get_submodule(attr)
    assert conv.in_channels == 4 and torch.equal(conv.weight[:, 3], old[:, 0]) and torch.equal(conv.weight[:, :3], old)
    with torch.no_grad():  # a zero context plane leaves the network's function unchanged
        assert torch.allclose(net(torch.cat([x, torch.zeros(2, 1, 16, 16)], 1)), before, atol=1e-6)


def test_arm_refuses_a_backbone_without_a_plain_input_convolution():
    class StandardisedStem(nn.Conv2d):
        pass

    with pytest.raises(ValueError, match="plain convolution on the image"):
        input_conv(nn.Sequential(StandardisedStem(3, 4, 3), nn.Conv2d(4, 4, 1)))
    with pytest.raises(ValueError, match="has none"):
        input_conv(nn.Linear(3, 3))


def test_arm_context_is_the_mean_over_each_support_set():
    alg = build("ARM", VIT, batch_size=4)
    alg.eval()
    x = torch.randn(8, 3, 16, 16)
    with torch.no_grad():
        base = alg.predict(x)
        x2 = x.clone()
        x2[5] += 1.0  # an image of the second support set (images 4..7)
        moved = alg.predict(x2)
    assert torch.equal(moved[:4], base[:4])  # the first support set does not see it
    assert not torch.allclose(moved[[4, 6, 7]], base[[4, 6, 7]])  # its own set's context changed
    with torch.no_grad():  # 6 images do not divide into sets of 4: one support set
        assert not torch.allclose(alg.predict(x2[2:])[:2], alg.predict(x[2:])[:2])


def test_arm_global_batch_norm_equals_batch_norm():
    torch.manual_seed(0)
    ours, ref = GlobalBatchNorm2d(5), nn.BatchNorm2d(5)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(6, 5, 4, 4) * 3 + 1
    assert torch.equal(ours(x), ref(x))  # without a shard: nn.BatchNorm2d itself
    with use_shard(Shard(6, torch.arange(6))):  # the global-statistics formula (one process holds everything)
        out = ours(x)
    assert torch.allclose(out, ref(x), atol=1e-5)
    assert torch.allclose(ours.running_mean, ref.running_mean) and torch.allclose(ours.running_var, ref.running_var)
    assert ContextNet(3)(torch.randn(2, 3, 8, 8)).shape == (2, 1, 8, 8)


@pytest.mark.parametrize("trained", [False, True])
def test_arm_context_network_is_trained_only_when_asked(trained):
    alg = build("ARM", VIT, arm_train_context=trained)
    before = [p.detach().clone() for p in alg.context_net.parameters()]
    train(alg, 2)
    assert same(before, alg.context_net.parameters()) is not trained


# ----- SagNet -----------------------------------------------------------------------------------
def test_sagnet_style_randomisation_keeps_content_and_mixes_statistics():
    z = torch.randn(6, 10) * 2 + 1
    torch.manual_seed(3)
    out = randomize(z, "style")
    torch.manual_seed(3)
    alpha, perm = torch.rand(6, 1), torch.randperm(6)
    mu, var = z.mean(1, keepdim=True), z.var(1, keepdim=True)
    assert torch.allclose(out.mean(1, keepdim=True), alpha * mu + (1 - alpha) * mu[perm], atol=1e-5)
    normed = (z - mu) / (var + 1e-5).sqrt()
    restyled = (out - out.mean(1, keepdim=True)) / (out.var(1, keepdim=True) + 1e-5).sqrt()
    assert torch.allclose(restyled, normed, atol=1e-4)


def test_sagnet_content_randomisation_swaps_detached_content():
    z = (torch.randn(5, 8) * 3).requires_grad_(True)
    torch.manual_seed(4)
    out = randomize(z, "content")
    torch.manual_seed(4)
    torch.rand(5, 1)
    perm = torch.randperm(5)
    mu, var = z.mean(1, keepdim=True), z.var(1, keepdim=True)
    expected = ((z - mu) / (var + 1e-5).sqrt())[perm] * (var + 1e-5).sqrt() + mu
    assert torch.allclose(out, expected, atol=1e-5)
    (g,) = torch.autograd.grad(out[0].sum(), z)
    assert perm[0] == 0 or torch.count_nonzero(g[perm[0]]) == 0  # no gradient into the borrowed content
    with pytest.raises(ValueError, match="style"):
        randomize(z, "colour")


def test_sagnet_adversary_targets_uniform_predictions_and_steps_three_optimisers():
    assert uniform_prediction_loss(torch.zeros(4, 7)).item() == pytest.approx(math.log(7))
    assert uniform_prediction_loss(torch.tensor([[5.0, -5.0]])).item() > math.log(2)
    alg = build("SagNet", GMOE)
    style, head = params(alg.style_head), params(alg.classifier())
    out = alg.update(minibatches(0), 0)
    assert {"loss_c", "loss_s", "loss_adv"} <= set(out) and out["loss_aux"] > 0
    assert not same(style, alg.style_head.parameters()) and not same(head, alg.classifier().parameters())
    assert set(alg.optimizers()) == {"optimizer", "classifier", "style"}


# ----- RSC ---------------------------------------------------------------------------------------
def test_rsc_feature_mask_mutes_the_top_gradients_as_numpy_percentile():
    g = torch.randn(4, 12, dtype=torch.float64)
    mask = feature_mask(g, 0.3)
    expected = g < torch.from_numpy(np.percentile(g.numpy(), 70, axis=1))[:, None]
    assert torch.equal(mask.bool(), expected) and mask.sum(1).tolist() == [8.0] * 4  # 0.7 * 11 = 7.7: 8 kept


def test_rsc_spares_the_samples_whose_true_class_changes_least():
    y = torch.tensor([0, 0, 0, 0])
    logits = torch.zeros(4, 2)
    muted = torch.tensor([[0.0, 0.0], [-0.5, 0.0], [-1.0, 0.0], [-3.0, 0.0]])  # drops 0 < d1 < d2 < d3
    f_mask = torch.zeros(4, 3)
    mask = rsc_masks(torch.ones(4, 3), logits, muted, y, f_mask, b_drop=0.5)
    assert mask.tolist() == [[1.0] * 3, [1.0] * 3, [0.0] * 3, [0.0] * 3]


# ----- CAD / CondCAD -----------------------------------------------------------------------------
def _bottleneck_by_definition(z, y, d, t, conditional):
    """The flipped CAD/CondCAD loss written sample by sample."""
    losses = []
    s = z @ z.t() / t
    for i in range(len(z)):
        pos_y = [j for j in range(len(z)) if j != i and y[j] == y[i]]
        targets = [j for j in (pos_y if conditional else range(len(z))) if d[j] != d[i] and j != i]
        pool = pos_y if conditional else [j for j in range(len(z)) if j != i]
        if not pos_y or not targets:
            continue
        log_p = [s[i, j] - torch.logsumexp(s[i, pool], 0) for j in targets]
        losses.append(-(t / 0.07) * torch.logsumexp(torch.stack(log_p), 0))
    return torch.stack(losses).mean()


@pytest.mark.parametrize("conditional", [False, True])
def test_cad_bottleneck_equals_its_definition(conditional):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(12, 5, generator=g, dtype=torch.float64)
    y, d = torch.randint(0, 3, (12,), generator=g), torch.arange(12) % 3
    got = domain_bottleneck(z, y, d, 0.1, conditional)
    assert got.item() == pytest.approx(_bottleneck_by_definition(z, y, d, 0.1, conditional).item(), rel=1e-10)


def test_cad_two_samples_known_value_and_finite_mean():
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # each sample's only neighbour is in the other domain: log p = 0, logsumexp over it = 0
    assert domain_bottleneck(z, torch.tensor([0, 0]), torch.tensor([0, 1]), 0.1, False).item() == pytest.approx(0.0)
    assert finite_mean(torch.tensor([1.0, float("inf"), 3.0])).item() == 2.0
    assert finite_mean(torch.tensor([float("inf")])).item() == 0.0


# ----- TRM ---------------------------------------------------------------------------------------
def test_trm_neumann_series_and_domainbed_aliasing():
    h_mat = torch.tensor([[0.5, 0.1], [0.1, 0.3]], dtype=torch.float64)
    v = torch.tensor([1.0, -2.0], dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.float64)
    terms = [torch.linalg.matrix_power(eye - h_mat, k) @ v for k in range(11)]
    paper = neumann_inverse_hvp(v, lambda u: h_mat @ u, aliasing=False)
    assert torch.allclose(paper, sum(terms))
    domainbed = neumann_inverse_hvp(v, lambda u: h_mat @ u, aliasing=True)
    assert torch.allclose(domainbed, 2 * terms[1] + sum(terms[2:]))
    assert torch.allclose(neumann_inverse_hvp(v, lambda u: h_mat @ u, terms=200, aliasing=False),
                          torch.linalg.solve(h_mat, v))
    big = neumann_inverse_hvp(v, lambda u: -u, aliasing=False)  # (I - H) = 2I: stops once |h| > 10
    assert torch.equal(big, v * (1 + 2 + 4))


def test_trm_penalty_starts_after_iters_and_moves_alpha():
    alg = build("TRM", VIT, iters=1)
    alpha0 = alg.alpha.clone()
    heads = [params(h) for h in alg.domain_heads]
    out = alg.update(minibatches(0), 0)
    assert out["trm_loss"] == 0.0 and torch.equal(alg.alpha, alpha0)
    out = alg.update(minibatches(1), 1)
    assert out["trm_loss"] != 0.0 and not torch.equal(alg.alpha, alpha0)
    assert torch.all(alg.alpha.diagonal() == 0)
    assert all(not same(h, m.parameters()) for h, m in zip(heads, alg.domain_heads))
    with pytest.raises(ValueError, match="trm_variant"):
        build("TRM", VIT, trm_variant="nope")


# ----- Transfer ----------------------------------------------------------------------------------
def test_transfer_projection_and_gap():
    center, adv = nn.Linear(3, 2), nn.Linear(3, 2)
    with torch.no_grad():
        for p, q in zip(adv.parameters(), center.parameters()):
            p.copy_(q + 1.0)
    assert project_to_ball(adv, center, 1.0) == pytest.approx(math.sqrt(8))
    dist = torch.sqrt(sum(((a - c) ** 2).sum() for a, c in zip(adv.parameters(), center.parameters())))
    assert dist.item() == pytest.approx(1.0)
    inside = [p.clone() for p in adv.parameters()]
    project_to_ball(adv, center, 5.0)
    assert same(inside, adv.parameters())
    assert loss_gap([torch.tensor(2.0), torch.tensor(0.5), torch.tensor(3.0)]).item() == 2.5


@pytest.mark.parametrize("gda", [False, True])
def test_transfer_keeps_the_adversary_near_the_classifier(gda):
    alg = build("Transfer", VIT, gda=gda, delta=0.01, lr_d=1.0)
    assert isinstance(alg.optimizer, torch.optim.SGD if gda else torch.optim.Adam)
    net = params(alg.network)
    alg.update(minibatches(0), 0)
    assert not same(net, alg.network.parameters())  # DomainBed's gda=True never moved the network
    dist = torch.sqrt(sum(((a - c) ** 2).sum() for a, c in zip(alg.adv_classifier.parameters(),
                                                             alg.classifier().parameters())))
    assert dist.item() <= 0.01 + 1e-6


# ----- URM ---------------------------------------------------------------------------------------
def test_urm_bounds_the_features_in_training_and_prediction():
    alg = build("URM", VIT)
    batch = minibatches(0)[0]
    alg.eval()
    activation, head = alg.classifier()
    assert isinstance(activation, nn.Tanh)
    with torch.no_grad():
        z = activation(alg.features(batch))
        assert z.abs().max() <= 1.0 and torch.equal(alg.predict(batch.x), head(z))
        assert torch.equal(alg.predict(batch.x), alg.network(batch.x))  # the network alone predicts the same
    disc = params(alg.discriminator)
    alg.train()
    out = alg.update(minibatches(1), 1)
    assert {"gen_loss", "disc_loss"} <= set(out) and not same(disc, alg.discriminator.parameters())
    with pytest.raises(ValueError, match="urm_generator_output"):
        build("URM", VIT, urm_generator_output="identity")


def test_urm_soft_labels_stay_in_their_ranges():
    alg = build("URM", VIT, urm_discriminator_label_smoothing=0.2)
    like = torch.zeros(1000)
    ones, zeros = alg.discriminator_labels(like, 1.0), alg.discriminator_labels(like, 0.0)
    assert ones.min() >= 0.8 and ones.max() <= 1.0 and zeros.min() >= 0.0 and zeros.max() <= 0.2


# ----- ADRMX -------------------------------------------------------------------------------------
def _supcon_by_definition(z, y, d, lam=0.5, t=0.07):
    zn = F.normalize(z, dim=1)
    total, used = 0.0, 0
    for i in range(len(z)):
        w = [lam if d[j] == d[i] else 1 - lam for j in range(len(z))]
        e = [w[j] * math.exp(float(zn[i] @ zn[j]) / t) for j in range(len(z))]
        denom = sum(e[j] for j in range(len(z)) if j != i) + 1e-5
        pos = [j for j in range(len(z)) if j != i and y[j] == y[i]]
        if pos:
            total += sum(math.log(e[j] / denom + 1e-5) for j in pos) / len(pos)
            used += 1
    return -total / (used + 1)


def test_adrmx_supcon_equals_its_definition():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(10, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1, 2, 0, 1, 2, 2, 3])  # class 3 has no positive
    d = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    assert supcon_lambda(z, y, d).item() == pytest.approx(_supcon_by_definition(z, y, d), rel=1e-10)


def test_adrmx_remix_pairs_domainbed_positions_and_paper_members():
    y = torch.tensor([2, 0, 2, 1, 2, 0])
    torch.manual_seed(0)
    positions = remix_pairs(y, 4, "domainbed")
    torch.manual_seed(0)
    members = remix_pairs(y, 4, "paper")
    assert len(positions) == len(members) == 2  # classes 1 and 3 have fewer than two samples
    assert all(y[a] == y[b] for a, b in members) and {int(y[a]) for a, _ in members} == {0, 2}
    assert all(a < 3 and b < 3 for a, b in positions)  # positions within the class, used on the batch


def test_adrmx_predicts_with_its_nonlinear_head_and_discriminator_turns_leave_backbones():
    alg = build("ADRMX", VIT, d_steps_per_g_step=2)
    assert isinstance(alg.network.get_classifier(), nn.Sequential)
    assert isinstance(alg.domain_network.get_classifier(), nn.Identity)
    nets, disc = params(alg.network) + params(alg.domain_network), params(alg.discriminator)
    out = alg.update(minibatches(0), 0)  # update 1: 1 % 3 < 2, a discriminator turn
    assert "loss_cnt_int" not in out and same(nets, params(alg.network) + params(alg.domain_network))
    assert not same(disc, alg.discriminator.parameters())
    out = alg.update(minibatches(1), 1)  # update 2: the generator turn
    assert "loss_remixed" in out and not same(nets, params(alg.network) + params(alg.domain_network))
    x = minibatches(5)[0]
    assert torch.equal(predictions(alg, x), alg.network.eval()(x.x))


# ----- ERM++ -------------------------------------------------------------------------------------
def test_erm_plus_plus_probes_linearly_then_fine_tunes_and_averages():
    alg = build("ERMPlusPlus", VIT, linear_steps=1, ermpp_sma_start_iter=3)
    head = alg.classifier()
    body = [p for p in alg.network.parameters() if all(p is not q for q in head.parameters())]
    seen = []
    for step in range(5):
        before = [p.detach().clone() for p in body]
        out = alg.update(minibatches(step), step)
        assert out["linear_probe"] == float(step <= 1)
        assert same(before, body) is (step <= 1)
        seen.append(flatten(alg.network))
    # updates 3..5 average theta_2..theta_5 (DomainBed: from its counter 3 on, with the previous copy)
    assert torch.allclose(flatten(alg.network_sma), torch.stack(seen[1:]).mean(0), atol=1e-6)
    assert set(alg.optimizers()) == {"optimizer", "linear_optimizer"} and alg.inference_network() is alg.network_sma


@pytest.mark.parametrize("backbone,refreshed", [(RESNET, True), (VIT, False)])
def test_erm_plus_plus_refreshes_batch_norm_of_the_average(backbone, refreshed):
    alg = build("ERMPlusPlus", backbone)
    train(alg, 1)
    assert alg.refresh_batch_norm is refreshed and not alg.network_sma.training
    if refreshed:  # the copy's own counter: one refresh forward per update
        assert int(alg.network_sma.bn1.num_batches_tracked) == 1


# ----- resuming the extra state ------------------------------------------------------------------
STATEFUL = [("ERMPlusPlus", ["network_sma", "sma_count", "update_count"]), ("TRM", ["domain_heads", "alpha"]),
            ("Transfer", ["adv_classifier"]), ("ADRMX", ["domain_network", "discriminator", "update_count"]),
            ("URM", ["discriminator"]), ("ARM", ["context_net"]), ("SagNet", ["style_head"])]


@pytest.mark.parametrize("name,parts", STATEFUL)
def test_extra_state_is_saved_and_resumed(name, parts):
    alg = build(name, RESNET if name == "ERMPlusPlus" else GMOE)
    train(alg, 3)
    fresh = build(name, RESNET if name == "ERMPlusPlus" else GMOE, seed=1)
    load(fresh, save(alg))
    for part in parts:
        a, b = getattr(alg, part), getattr(fresh, part)
        sa = a.state_dict() if isinstance(a, nn.Module) else {"": a}
        sb = b.state_dict() if isinstance(b, nn.Module) else {"": b}
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa), part
    assert train(alg, 2, start=3) == train(fresh, 2, start=3)
    assert torch.equal(predictions(alg, minibatches(9)[0]), predictions(fresh, minibatches(9)[0]))


@pytest.mark.parametrize("name", ["ARM", "SagNet", "RSC", "URM", "ERMPlusPlus"])
def test_single_source_capable_algorithms_train_on_one_domain(name):
    alg = build(name, VIT, num_domains=1)
    assert all(math.isfinite(v) for v in alg.update(minibatches(0, n=1), 0).values())
