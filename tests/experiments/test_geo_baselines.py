"""ERM+LE model, MoGE-SE fallback, plug-in encoder swap and routing analysis figures on tiny data."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.transforms import ToFloat
from dgmoe.models.erm_le import LocationConcatViT
from dgmoe.models.location.encoders import SHSirenEncoder
from dgmoe.models.moge import build_moge
from dgmoe.models.moge_fallbacks import (
    collect_features,
    fit_linear_head,
    fit_shared_expert_head,
    replace_location_encoder,
)

SMALL = dict(img_size=16, patch_size=4, embed_dim=32, depth=4, num_heads=2, num_classes=3)


def _domain(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8).numpy()
    labels = torch.randint(0, 3, (n,), generator=g).numpy()
    meta = {"lat": (torch.rand(n, generator=g) * 120 - 60).numpy(),
            "lon": (torch.rand(n, generator=g) * 300 - 150).numpy()}
    return ArrayDomain(images, labels, meta)


def test_erm_le_concatenates_location_embedding():
    torch.manual_seed(0)
    model = LocationConcatViT(**SMALL)
    x = torch.randn(4, 3, 16, 16)
    meta = {"lat": torch.tensor([0.0, 10.0, 20.0, 30.0]), "lon": torch.tensor([0.0, 5.0, -5.0, 100.0])}
    feats = model.forward_head(model.forward_features(x, meta=meta), pre_logits=True)
    assert feats.shape == (4, 32 + 256) and model.get_classifier().in_features == 288
    out = model(x, meta)
    other = model(x, {k: v.flip(0) for k, v in meta.items()})
    assert not torch.allclose(out, other)  # the prediction depends on the location
    out.sum().backward()
    assert model.location_mlp[0].weight.grad.abs().sum() > 0
    fresh = LocationConcatViT(**SMALL)
    with pytest.raises(RuntimeError, match="call forward_features"):
        fresh.forward_head(torch.randn(4, 17, 32))


def test_erm_le_registered_and_trains_with_erm():
    from dgmoe.algorithms import get_algorithm
    from dgmoe.data.base import Batch
    from dgmoe.models.registry import MODELS

    model = MODELS.get("vit_le_tiny_patch16_224")(**{**SMALL, "depth": 2})
    algo = get_algorithm("ERM")(model, 3, 1, {"lr": 1e-3, "weight_decay": 0.0})
    d = _domain(8)
    x, y, meta = d.gather(range(8))
    stats = algo.update([Batch(x.float() / 255, y, meta)])
    assert np.isfinite(stats["loss"])


def test_fit_linear_head_separable_and_folded_standardisation():
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    feats = torch.randn(60, 5, generator=g) * 0.1 + 100.0
    feats[torch.arange(60), labels] += 3.0  # separable, with a large offset the folding must handle
    head = fit_linear_head(feats, labels, 3, steps=300)
    assert (head(feats).argmax(1) == labels).float().mean() == 1.0
    with pytest.raises(ValueError, match="need features"):
        fit_linear_head(feats, labels[:5], 3)


def test_moge_se_fits_head_on_frozen_shared_features():
    torch.manual_seed(0)
    model = build_moge("t", {}, **SMALL)
    d = _domain(24)
    before = model.blocks[0].mlp.shared.fc1.weight.clone()
    fit_shared_expert_head(model, [d], [np.arange(20)], ToFloat(), num_classes=3, steps=50)
    assert model.routing_mode == "shared_only"
    assert torch.equal(before, model.blocks[0].mlp.shared.fc1.weight)
    assert all(not p.requires_grad for n, p in model.named_parameters() if not n.startswith("head."))
    feats, labels = collect_features(model, [d], [None], ToFloat())
    assert feats.shape == (24, 32)
    x, _, _ = d.gather(range(4))
    assert model(x.float() / 255).shape == (4, 3)  # no metadata needed any more
    with pytest.raises(ValueError, match="needs a MoGE network"):
        fit_shared_expert_head(LocationConcatViT(**SMALL), [d], [None], ToFloat(), 3)


def test_replace_location_encoder_checks_width():
    model = build_moge("t", {}, **SMALL)
    replace_location_encoder(model, SHSirenEncoder(num_degrees=4, hidden=16, out_dim=256))
    with pytest.raises(ValueError, match="outputs 8 values but the routers' codes have 256"):
        replace_location_encoder(model, SHSirenEncoder(num_degrees=4, hidden=16, out_dim=8))


def test_routing_analysis_figures(tmp_path):
    from dgmoe.analysis.geo import (
        collect_routing,
        forced_expert_accuracy,
        routing_frequency,
        save_forced_matrix,
        save_routing_frequency,
        save_routing_map,
    )

    torch.manual_seed(0)
    model = build_moge("t", {}, **SMALL)
    d = _domain(30)
    table = collect_routing(model, [d], ToFloat())
    assert len(table.gates) == 2 and table.gates[-1].shape == (30, 6)
    torch.testing.assert_close(torch.from_numpy(table.lat), d.meta["lat"])
    freq = routing_frequency(table.top_expert(), 6)
    assert freq.sum() == pytest.approx(1.0) and freq.shape == (6,)
    matrix, sizes = forced_expert_accuracy(model, [d], ToFloat())
    assert matrix.shape == (6, 6) and sizes.sum() == 30 and model.routing_mode == "routed"
    assert np.isnan(matrix[sizes == 0]).all() and np.isfinite(matrix[sizes > 0]).all()
    for path in (save_routing_map(table, tmp_path / "map.png"), save_forced_matrix(matrix, sizes, tmp_path / "m.png"),
                 save_routing_frequency(freq, tmp_path / "f.png")):
        assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
