"""D3G and D3G_WRAP: the WRAP encoding, relation weights (fixed/learned mix, own head left out in training,
the test-time mix), the consistency loss, unseen domains, errors, 2 processes = 1, and `dgmoe train`."""
import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers.two_processes import run_on_two_processes

from dgmoe.algorithms import get_algorithm
from dgmoe.algorithms.d3g import relation_mix
from dgmoe.data.base import Batch
from dgmoe.data.geo.metadata import MetadataError
from dgmoe.engine.hparams import default_hparams
from dgmoe.models import create_model
from dgmoe.models.location import build_location_encoder, wrap_features

C, D = 3, 3  # classes, training environments


def tiny(seed=0, gmoe=False):
    torch.manual_seed(seed)
    name = "gmoe_tiny_patch16_224" if gmoe else "vit_tiny_patch16_224"
    extra = {"moe_layers": [1]} if gmoe else {}
    return create_model(name, num_classes=C, img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=2,
                        drop_path_rate=0.0, **extra)


def build(name="D3G", seed=0, num_domains=D, gmoe=False, **overrides):
    hp = default_hparams(name, "PACS", "gmoe_tiny_patch16_224" if gmoe else "vit_tiny_patch16_224")
    hp.update(lr=1e-3, **overrides)
    return get_algorithm(name)(tiny(seed, gmoe), C, num_domains, hp)


def batches(seed, n=D, size=4, regions=None):
    """One minibatch per environment with lat/lon (and meta['region'] when `regions[d]` gives each sample's)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for d in range(n):
        meta = {"lat": torch.rand(size, generator=g) * 160 - 80, "lon": torch.rand(size, generator=g) * 340 - 170}
        if regions is not None:
            meta["region"] = torch.as_tensor(regions[d], dtype=torch.long)
        out.append(Batch(torch.randn(size, 3, 16, 16, generator=g) + d,
                         torch.randint(0, C, (size,), generator=g), meta))
    return out


def cat_meta(bs):
    return {k: torch.cat([b.meta[k] for b in bs]) for k in bs[0].meta}


def shifted_cos(alg, queries):
    """(1 + cos(w q, w e_k)) / 2 written out: [N, H]."""
    w = alg.relation_scale.detach()
    q, e = w * queries, w * alg.domain_embedding.detach()
    cos = (q @ e.T) / (q.norm(dim=1, keepdim=True) * e.norm(dim=1)[None])
    return (1 + cos) / 2


def head_logits(alg, z):
    return torch.stack([z @ alg.head_weight[k].T + alg.head_bias[k] for k in range(alg.num_heads)], dim=1)


# ----- WRAP -----------------------------------------------------------------------------------------

def test_wrap_is_cos_lon_cos_lat_sin_lon_sin_lat():
    meta = {"lat": torch.tensor([0.0, -30.0, 90.0, 10.0]), "lon": torch.tensor([0.0, 90.0, 180.0, -180.0])}
    got = build_location_encoder("wrap")(meta)
    h = math.sqrt(3) / 2
    expected = torch.tensor([[1, 1, 0, 0], [0, h, 1, -0.5], [-1, 0, 0, 1],
                             [-1, math.cos(math.radians(10)), 0, math.sin(math.radians(10))]])
    assert got.shape == (4, 4) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    # the date line: lon -180 and 180 encode the same point
    torch.testing.assert_close(wrap_features(torch.tensor([[-180.0, 5.0]], dtype=torch.float64)),
                               wrap_features(torch.tensor([[180.0, 5.0]], dtype=torch.float64)))


@pytest.mark.parametrize("meta,match", [({"lat": torch.tensor([95.0]), "lon": torch.tensor([0.0])}, "lat"),
                                        ({"lat": torch.tensor([float("nan")]), "lon": torch.tensor([0.0])}, "missing"),
                                        ({"lat": torch.tensor([0.0])}, "lon")])
def test_wrap_rejects_bad_coordinates(meta, match):
    with pytest.raises(MetadataError, match=match):
        build_location_encoder("wrap")(meta)


# ----- relation weights ------------------------------------------------------------------------------

def test_relation_is_beta_indicator_plus_one_minus_beta_learned_over_seen_heads():
    alg = build("D3G", d3g_domain_field="region", d3g_num_groups=3, d3g_beta=0.7)
    alg.head_seen[:] = torch.tensor([True, False, True])
    domains = torch.tensor([0, 2, -1])
    got = alg.relation(domains, None).detach()
    learned = shifted_cos(alg, alg.domain_embedding.detach()[domains.clamp(min=0)])
    expected = 0.7 * F.one_hot(domains.clamp(min=0), 3).float() + 0.3 * learned
    expected[2] = 0.0  # an unknown domain has neither the indicator nor an embedding
    expected[:, 1] = 0.0  # a head never trained takes no part
    torch.testing.assert_close(got, expected)

    wrap = build("D3G_WRAP", d3g_beta=0.7)
    meta = cat_meta(batches(0))
    n = len(meta["lat"])
    own = torch.arange(n) % D
    with torch.no_grad():
        query = wrap.location_mlp(wrap_features(torch.stack([meta["lon"], meta["lat"]], 1).double()).float())
        expected = 0.7 * F.one_hot(own, D).float() + 0.3 * shifted_cos(wrap, query)
        torch.testing.assert_close(wrap.relation(own, meta), expected)
        # an unseen domain keeps the location-based relation
        torch.testing.assert_close(wrap.relation(torch.full((n,), -1), meta), 0.3 * shifted_cos(wrap, query))


def test_relation_mix_and_its_zero_sum_rows():
    logits = torch.randn(3, 2, 4)
    weights = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, -2.0]])
    mix, valid = relation_mix(logits, weights)
    torch.testing.assert_close(mix[0], (logits[0, 0] + 3 * logits[0, 1]) / 4)
    assert valid.tolist() == [True, False, False]


def test_training_loss_is_own_head_plus_consistency_without_the_own_head():
    alg = build("D3G_WRAP", d3g_consistency_weight=0.5)
    bs = batches(1)
    ref = copy.deepcopy(alg)
    out = alg.update(bs, 0)
    with torch.no_grad():
        x, y, meta = torch.cat([b.x for b in bs]), torch.cat([b.y for b in bs]), cat_meta(bs)
        own = torch.arange(D).repeat_interleave(4)
        logits = head_logits(ref, ref.features(x, meta))
        rows = torch.arange(len(y))
        task = F.cross_entropy(logits[rows, own], y)
        weights = ref.relation(own, meta)
        others = weights.clone()
        others[rows, own] = 0.0
        mix = (others[:, :, None] * logits).sum(1) / others.sum(1, keepdim=True)
        consistency = F.cross_entropy(mix, y)
        with_own = F.cross_entropy((weights[:, :, None] * logits).sum(1) / weights.sum(1, keepdim=True), y)
    assert out["loss_task"] == pytest.approx(task.item(), rel=1e-5)
    assert out["loss_consistency"] == pytest.approx(consistency.item(), rel=1e-5)
    assert abs(with_own.item() - consistency.item()) > 1e-4  # the test can tell whether the own head was zeroed
    assert out["loss"] == pytest.approx(task.item() + 0.5 * consistency.item() + out["loss_aux"], rel=1e-5)


def test_consistency_trains_the_relation_and_the_own_head_gets_only_its_own_loss():
    alg = build("D3G_WRAP", d3g_consistency_weight=1.0)
    bs = batches(2)
    before = {k: v.clone() for k, v in alg.state_dict().items()}
    alg.update(bs, 0)
    after = alg.state_dict()
    for key in ("relation_scale", "domain_embedding", "location_mlp.0.weight", "head_weight"):
        assert not torch.equal(before[key], after[key]), key
    # with a zero consistency weight the relation gets no gradient at all
    alg = build("D3G_WRAP", d3g_consistency_weight=0.0)
    before = {k: v.clone() for k, v in alg.state_dict().items()}
    alg.update(bs, 0)
    assert torch.equal(before["relation_scale"], alg.state_dict()["relation_scale"])


# ----- prediction and unseen domains -----------------------------------------------------------------

def test_prediction_is_the_relation_weighted_mix_and_skips_heads_never_trained():
    alg = build("D3G_WRAP", d3g_domain_field="region", d3g_num_groups=3, d3g_beta=0.8)
    alg.update(batches(3, regions=[[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1]]), 0)  # group 2 never occurs
    assert alg.head_seen.tolist() == [True, True, False]
    test = batches(4, n=1, regions=[[0, 1, 2, -1]])[0]
    alg.eval()
    with torch.no_grad():
        got = alg.predict(test.x, test.meta)
        logits = head_logits(alg, alg.features(test.x, test.meta))
        query = alg.location_mlp(wrap_features(torch.stack([test.meta["lon"], test.meta["lat"]], 1).double()).float())
        a = 0.8 * F.one_hot(torch.tensor([0, 1, 0, 0]), 3).float() * torch.tensor([1.0, 1, 0, 0])[:, None]
        a = (a + 0.2 * shifted_cos(alg, query)) * torch.tensor([1.0, 1.0, 0.0])
        torch.testing.assert_close(got, (a[:, :, None] * logits).sum(1) / a.sum(1, keepdim=True))
        alg.head_weight[2].add_(5.0)  # the untrained head changes nothing
        torch.testing.assert_close(alg.predict(test.x, test.meta), got)
        moved = dict(test.meta, lat=-test.meta["lat"])  # an unseen region: the location decides
        assert not torch.allclose(alg.predict(test.x, moved)[2:], got[2:])


def test_d3g_without_location_averages_the_heads_on_an_unseen_domain():
    alg = build("D3G")
    alg.update(batches(5), 0)
    x = batches(6, n=1)[0].x
    alg.eval()
    with torch.no_grad():
        expected = head_logits(alg, alg.features(x)).mean(1)
        torch.testing.assert_close(alg.predict(x), expected)
        torch.testing.assert_close(alg.predict(x, {"lat": torch.zeros(4), "lon": torch.zeros(4)}), expected)
    region = build("D3G", d3g_domain_field="region", d3g_num_groups=4, d3g_beta=0.8)
    region.update(batches(5, regions=[[0] * 4, [1] * 4, [2] * 4]), 0)
    test = batches(6, n=1, regions=[[0, 3, -1, 2]])[0]
    region.eval()
    with torch.no_grad():
        logits = head_logits(region, region.features(test.x))
        got = region.predict(test.x, test.meta)
        torch.testing.assert_close(got[1:3], logits[1:3, :3].mean(1))  # group 3 never seen, -1 unknown: uniform
        e = region.domain_embedding.detach()
        for row, g in ((0, 0), (3, 2)):  # a seen group: its indicator, refined by the learned relation
            a = 0.8 * F.one_hot(torch.tensor(g), 4).float() + 0.2 * shifted_cos(region, e[g:g + 1])[0]
            a[3] = 0.0
            torch.testing.assert_close(got[row], (a[:, None] * logits[row]).sum(0) / a.sum())


# ----- hyperparameters and errors --------------------------------------------------------------------

def test_dataset_defaults_for_the_domains():
    fmow = default_hparams("D3G_WRAP", "FMoW")
    assert (fmow["d3g_domain_field"], fmow["d3g_num_groups"], fmow["d3g_beta"],
            fmow["d3g_consistency_weight"]) == ("region", 6, 0.8, 0.5)
    geo = default_hparams("D3G", "GeoMNIST")
    assert (geo["d3g_domain_field"], geo["d3g_num_groups"]) == ("", 6)
    assert default_hparams("D3G", "PACS")["d3g_domain_field"] == ""


def test_errors_are_specific():
    with pytest.raises(ValueError, match="at least 2 training domains, got 1"):
        build("D3G", num_domains=1)
    build("D3G", num_domains=1, d3g_domain_field="region", d3g_num_groups=2)  # one environment, two groups
    with pytest.raises(ValueError, match="needs d3g_num_groups >= 2"):
        build("D3G", d3g_domain_field="region")
    with pytest.raises(ValueError, match="d3g_location_encoder"):
        build("D3G_WRAP", d3g_location_encoder="location_id")
    with pytest.raises(MetadataError, match="lat"):
        build("D3G_WRAP").update([Batch(b.x, b.y) for b in batches(0)], 0)
    alg = build("D3G", d3g_domain_field="region", d3g_num_groups=2)
    with pytest.raises(MetadataError, match="region"):
        alg.update(batches(0), 0)
    with pytest.raises(MetadataError, match=r"in \[0, 2\)"):
        alg.update(batches(0, regions=[[0, 1, 2, 0]] * D), 0)
    with pytest.raises(MetadataError, match="needs its group"):
        alg.update(batches(0, regions=[[0, 1, -1, 0]] * D), 0)


def test_moe_aux_loss_is_added_exactly_once(monkeypatch):
    from dgmoe.algorithms.base import Algorithm

    calls = []
    original = Algorithm.moe_aux_loss
    monkeypatch.setattr(Algorithm, "moe_aux_loss",
                        lambda self, network=None: calls.append(1) or original(self, network))
    for name in ("D3G", "D3G_WRAP"):
        calls.clear()
        out = build(name, gmoe=True).update(batches(0), 0)
        assert len(calls) == 1 and out["loss_aux"] > 0


# ----- two processes, heads per group (the seen groups are the global batch's) -------------------------

REGIONS = [[0, 0, 1, 1], [1, 1, 2, 2], [0, 0, 0, 0]]  # rank 0 of 2 never holds group 2; group 3 never occurs


def _steps(name, rank, world):
    from dgmoe.engine.distributed import DistInfo, average_metrics, make_gradient_averager, shard

    info = DistInfo(rank, world) if world > 1 else DistInfo()
    alg = build(name, gmoe=True, d3g_domain_field="region", d3g_num_groups=4)
    if info.enabled:
        alg.gradient_sync = make_gradient_averager(alg, info)
    torch.manual_seed(123)
    records = [average_metrics(alg.update(shard(batches(s, regions=REGIONS), info), s), info) for s in range(3)]
    alg.eval()
    test = batches(99, n=1, regions=[[0, 1, 2, 3]])[0]
    with torch.no_grad():
        return records, alg.predict(test.x, test.meta), alg.head_seen.clone()


def _both_algorithms(rank, world):
    return {name: _steps(name, rank, world) for name in ("D3G", "D3G_WRAP")}


def test_two_processes_equal_one_with_heads_per_group(tmp_path):
    two = run_on_two_processes(_both_algorithms, tmp_path)
    for name in ("D3G", "D3G_WRAP"):
        records, logits, seen = _steps(name, 0, 1)
        assert seen.tolist() == two[name][2].tolist() == [True, True, True, False]
        for a, b in zip(records, two[name][0]):
            for key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (name, key)
        torch.testing.assert_close(two[name][1], logits, rtol=1e-5, atol=1e-5)


# ----- through the engine on GeoMNIST ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["D3G", "D3G_WRAP"])
@pytest.mark.parametrize("model,hparams", [("vit_micro_patch7_28", {}),
                                           ("gmoe_micro_patch7_28", {"d3g_domain_field": "region"})])
def test_dgmoe_train_on_geomnist(name, model, hparams, cli, tmp_path):
    from dgmoe.data.geo.geomnist import geo_domains

    _, test_envs = geo_domains()
    out = tmp_path / "run"
    result = cli("train", "--dataset", "GeoMNIST", "--algorithm", name, "--model", model,
                 "--model-kwargs", '{"depth": 2}' if model.startswith("vit") else '{"depth": 2, "moe_layers": [1]}',
                 *[a for e in test_envs for a in ("--test-envs", e)], "--steps", "3", "--checkpoint-freq", "2",
                 "--n-per-domain", "16", "--hparams", json.dumps({"batch_size": 8, **hparams}),
                 "--progress", "none", "--num-threads", "1", "--output-dir", out)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 2]
    last = records[-1]
    assert last["hparams"]["d3g_domain_field"] == hparams.get("d3g_domain_field", "")
    assert all(math.isfinite(last[k]) for k in ("loss", "loss_task", "loss_consistency"))
    assert (last["loss_aux"] > 0) == model.startswith("gmoe")
    assert all(0.0 <= last[f"env{e}_in_acc"] <= 1.0 for e in test_envs)
