"""MoGE model (eq. 1): metadata-only routing, gradients, modes, unknown ids, eq. 4 algorithm step."""
from __future__ import annotations

import pytest
import torch

from dgmoe.data.geo.metadata import MetadataError
from dgmoe.models.moge import MoGEVisionTransformer, build_moge
from dgmoe.moe import MoEMlp, record_routing, routing_context

SMALL = dict(patch_size=4, embed_dim=32, depth=4, num_heads=2)


def _model(**kw) -> MoGEVisionTransformer:
    torch.manual_seed(0)
    return build_moge("test", SMALL, img_size=16, num_classes=5, **kw)


def _batch(b=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, 3, 16, 16, generator=g)
    meta = {"lat": torch.rand(b, generator=g) * 160 - 80, "lon": torch.rand(b, generator=g) * 340 - 170}
    y = torch.randint(0, 5, (b,), generator=g)
    return x, y, meta


def gates_of(recorded, layer_name, num_experts=6):
    """Dense alpha [B, E] of an image-routed layer from a routing record."""
    rec = recorded[layer_name]
    return torch.zeros(len(rec.expert_ids), num_experts).scatter(1, rec.expert_ids, rec.gates)


def test_defaults_follow_the_paper():
    model = _model()
    cfg = model.info.sparse
    assert (cfg.num_experts, cfg.top_k, model.info.sparse_blocks) == (6, 3, (0, 2))  # last-two of depth 4
    assert (cfg.routing, cfg.shared_expert, cfg.router, cfg.router_dim) == ("image", True, "cosine", None)
    assert model.location_encoder.out_dim == 256 and model.location_encoder.posenc.num_degrees == 10
    layer = model.moge_layers()[0]
    assert float(layer.gamma.detach()) == pytest.approx(0.5)
    assert model.uses_metadata and model.info.uses_metadata


def test_registered_tiny_model_has_moge_blocks_8_and_10():
    from dgmoe.models.registry import MODELS

    model = MODELS.get("moge_tiny_patch16_224")(num_classes=3, img_size=32, depth=12)
    assert model.info.sparse_blocks == (8, 10) and model.embed_dim == 192
    assert isinstance(model.blocks[8].mlp, MoEMlp) and not isinstance(model.blocks[9].mlp, MoEMlp)


def test_routing_depends_only_on_metadata():
    model = _model().eval()
    x, _, meta = _batch()
    names = ["blocks.0.mlp", "blocks.2.mlp"]
    with record_routing(model) as first:
        model(x, meta)
    perm = torch.randperm(x.shape[0])
    with record_routing(model) as shuffled:
        model(x[perm], meta)  # images shuffled, metadata fixed
    for name in names:
        torch.testing.assert_close(gates_of(shuffled, name), gates_of(first, name))
    with record_routing(model) as flipped:
        model(x, {k: v.flip(0) for k, v in meta.items()})
    assert not torch.allclose(gates_of(flipped, names[0]), gates_of(first, names[0]))


@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_layer_output_is_equation_1(top_k):
    """Eq. 1 written from the paper: alpha(r) = softmax over the top-K of s(r)/tau (zero elsewhere), for every
    K; with K = 1 the one kept expert gets alpha = 1."""
    model = _model(top_k=top_k).eval()
    x, _, meta = _batch(4)
    layer = model.moge_layers()[0]
    h = torch.randn(4, 17, 32)
    r = model.context(meta)
    with routing_context(r):
        out = layer(h)
    with torch.no_grad():
        scores = layer.router(r).double()  # s(r) / tau_route, [B, E]
        top, idx = scores.topk(top_k, dim=-1)
        alpha = torch.zeros_like(scores).scatter(1, idx, top.softmax(dim=-1))
        gamma = layer.gamma.double()
        expected = torch.stack([
            gamma * layer.shared(h[i]).double() + (1 - gamma) * sum(
                alpha[i, e] * layer.experts.expert(e, h[i]).double() for e in range(6)) for i in range(4)])
    assert torch.all((alpha > 0).sum(1) == top_k)
    assert (out.double() - expected).abs().max() < 1e-6


def test_gamma_codes_temperature_and_encoder_get_gradients():
    model = _model().train()
    x, y, meta = _batch()
    loss = torch.nn.functional.cross_entropy(model(x, meta), y)
    loss.backward()
    for layer in model.moge_layers():
        assert layer.gamma_logit.grad.abs() > 0
        assert layer.router.codebook.grad.abs().sum() > 0
        assert layer.router.logit_scale.grad.abs() > 0
    assert model.location_encoder.nnet.layers[0].weight.grad.abs().sum() > 0


def test_training_records_losses_for_eq_4():
    model = _model().train()
    x, _, meta = _batch()
    model(x, meta)
    for layer in model.moge_layers():
        terms = layer.aux_losses()
        assert set(terms) == {"balance", "cka"} and 0.0 <= terms["cka"].item() <= 1.0
        features, domains = layer.shared_features()
        assert features.shape == (8, 32) and domains.shape == (8,)
    before = {id(layer): layer.aux_losses() for layer in model.moge_layers()}
    model.eval()
    model(x, meta)
    for layer in model.moge_layers():  # eval adds nothing
        assert layer._aux_forwards is not None and layer._aux_forwards.item() == 1
        assert all(torch.equal(v, before[id(layer)][k]) for k, v in layer.aux_losses().items())


def test_missing_metadata_errors_and_shared_only_mode():
    model = _model().eval()
    x, _, meta = _batch(4)
    with pytest.raises(MetadataError, match="meta=None"):
        model(x)
    bad = dict(meta, lat=torch.tensor([0.0, float("nan"), 1.0, 2.0]))
    with pytest.raises(MetadataError, match=r"meta\['lat'\] is missing"):
        model(x, bad)
    with pytest.raises(ValueError, match="routing context describes 3 images but the batch has 4"):
        model(x, {k: v[:3] for k, v in meta.items()})
    model.set_routing_mode("shared_only")
    out = model(x)  # no metadata needed (MoGE-SE)
    assert torch.isfinite(out).all()
    layer = model.moge_layers()[0]
    h = torch.randn(2, 5, 32)
    torch.testing.assert_close(layer(h), layer.shared(h))


def test_forced_expert_mode():
    model = _model().eval()
    x, _, meta = _batch(4)
    model.set_routing_mode("forced", expert=2)
    with record_routing(model) as rec:
        model(x, meta)
    assert rec["blocks.0.mlp"].expert_ids.flatten().tolist() == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="forced routing needs expert"):
        model.set_routing_mode("forced", expert=6)


def test_unknown_location_ids_route_through_unknown_slot():
    model = _model(location_encoder="location_id", location_encoder_kwargs={"num_ids": 20, "dim": 16,
                                                                            "id_dropout": 0.0})
    x, _, _ = _batch(6)
    model.train()
    model(x, {"location_id": torch.tensor([0, 1, 2, 3, 4, 5])})
    model.eval()
    with record_routing(model) as rec:
        model(x, {"location_id": torch.tensor([0, 1, 12, 13, 19, -1])})
    gates = gates_of(rec, "blocks.0.mlp")
    for i in (3, 4, 5):
        torch.testing.assert_close(gates[i], gates[2])  # every unseen id: the same unknown-slot routing
    assert not torch.allclose(gates[0], gates[2])
    rows = model.location_encoder.rows({"location_id": torch.tensor([0, 12, -1])})
    assert rows.tolist() == [0, 20, 20]


def test_no_shared_expert_ablation_and_bad_config():
    model = _model(shared_expert=False).eval()
    x, _, meta = _batch(4)
    assert model(x, meta).shape == (4, 5)
    with pytest.raises(ValueError, match="top_k"):
        _model(top_k=7)
    with pytest.raises(ValueError, match="outside"):
        _model(moe_layers=(2, 9))


def test_expand_dense_ffn_copies_into_shared_and_experts():
    model = _model()
    layer = model.blocks[0].mlp
    dense = {f"blocks.0.mlp.{k}": torch.randn(*v) for k, v in
             {"fc1.weight": (128, 32), "fc1.bias": (128,), "fc2.weight": (32, 128), "fc2.bias": (32,)}.items()}
    state = dict(dense)
    layer.expand_dense_ffn("blocks.0.mlp", state)
    assert "blocks.0.mlp.fc1.weight" not in state
    torch.testing.assert_close(state["blocks.0.mlp.experts.fc1_weight"][5], dense["blocks.0.mlp.fc1.weight"])
    torch.testing.assert_close(state["blocks.0.mlp.shared.fc2.bias"], dense["blocks.0.mlp.fc2.bias"])


def test_moge_algorithm_update_step():
    from dgmoe.algorithms.moge import MoGE
    from dgmoe.data.base import Batch
    from dgmoe.engine.hparams import default_hparams

    hp = default_hparams("MoGE", "GeoBench", "moge_tiny_patch16_224")
    assert hp["moge_supcon_weight"] == 0.1 and hp["moe_aux_weight"] == 0.01 and hp["moe_cka_weight"] == 0.1
    model = _model()
    algo = MoGE(model, num_classes=5, num_domains=2, hparams=hp)
    x, y, meta = _batch(16)
    before = model.moge_layers()[0].router.codebook.detach().clone()
    batches = [Batch(x[:8], y[:8], {k: v[:8] for k, v in meta.items()}),
               Batch(x[8:], y[8:], {k: v[8:] for k, v in meta.items()})]
    stats = algo.update(batches)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert stats["loss_aux"] > 0 and 0 <= stats["loss_cka"] <= 1
    assert not torch.equal(before, model.moge_layers()[0].router.codebook)
    assert algo.predict(x[:4], {k: v[:4] for k, v in meta.items()}).shape == (4, 5)
    from dgmoe.models.vit import VisionTransformer

    with pytest.raises(ValueError, match="needs a MoGE network"):
        MoGE(VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2), 5, 2, hp)
