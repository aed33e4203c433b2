"""Routing maps (top-1 expert per patch) and expert usage per domain."""
import pytest
import torch
from md_tables import table_rows

from dgmoe.analysis.routing import RoutingMaps, expert_usage, routing_maps, top1_patch_map, usage_summary, usage_table


def test_top1_patch_map_drops_cls_and_takes_first_choice():
    ids = torch.tensor([[[5, 0], [1, 2], [2, 1], [3, 0], [4, 1]]])  # CLS then a 2x2 grid, k=2
    assert top1_patch_map(ids, (2, 2)).tolist() == [[[1, 2], [3, 4]]]
    with pytest.raises(ValueError, match="patch grid"):
        top1_patch_map(ids, (3, 3))


def test_usage_fractions_and_table():
    m = torch.tensor([[[0, 0], [1, 2]]])
    assert expert_usage(m, 4).tolist() == [0.5, 0.25, 0.25, 0.0]
    maps = {d: RoutingMaps({"blocks.8.mlp": m}, {"blocks.8.mlp": m.float()}, {"blocks.8.mlp": 4}, (2, 2))
            for d in ("art", "photo")}
    table = usage_table(maps)
    assert len(table) == 8
    assert table.groupby(["layer", "domain"])["fraction"].sum().tolist() == [1.0, 1.0]
    md = usage_summary(table).markdown()
    assert ["blocks.8.mlp", "art", "50.0", "25.0", "25.0", "0.0"] in table_rows(md)


def test_routing_maps_on_gmoe_match_recorded_top1():
    from dgmoe.models import create_model
    from dgmoe.moe.record import record_routing

    torch.manual_seed(0)
    model = create_model("gmoe_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8)
    x = torch.randn(5, 3, 32, 32)
    maps = routing_maps(model, x, batch_size=2)
    assert maps.grid_size == (4, 4) and maps.layers
    model.eval()
    with record_routing(model) as rec:
        model(x)
    for name in maps.layers:
        e = maps.experts[name]
        assert e.shape == (5, 4, 4)
        assert 0 <= int(e.min()) and int(e.max()) < maps.num_experts[name]
        assert torch.equal(e.reshape(5, -1), rec[name].expert_ids[:, 1:, 0])


def test_routing_maps_rejects_dense_model():
    from dgmoe.models import create_model

    model = create_model("vit_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8)
    with pytest.raises(ValueError, match="no MoE layer"):
        routing_maps(model, torch.randn(1, 3, 32, 32))


def test_moge_runs_are_told_by_their_model_info_not_their_name():
    from dgmoe.analysis.pipeline import is_moge_run
    from dgmoe.models.info import describe_model

    moge = describe_model("moge_tiny_patch16_224", num_classes=3).to_dict()
    assert is_moge_run({"model_build": {"name": "renamed"}, "model_info": moge})
    gmoe = describe_model("gmoe_micro_patch7_28").to_dict()
    assert not is_moge_run({"model_build": {"name": "moge_lookalike"}, "model_info": gmoe})
    assert is_moge_run({"model_build": {"name": "moge_tiny_patch16_224", "kwargs": {"num_classes": 3}}})  # old run
