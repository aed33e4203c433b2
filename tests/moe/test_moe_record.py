"""Routing records (dgmoe.moe.record): nothing recorded, and nothing paid, while recording is off; the layer's
public observers and routing modes they rest on."""

import pytest
import torch
from moe_layers import make_layer

from dgmoe.moe import record_routing, routing_mode


def test_routing_record_costs_nothing_when_off():
    layer = make_layer()
    assert not layer._routing_observers
    with record_routing(layer):
        assert len(layer._routing_observers) == 1
    assert not layer._routing_observers


def test_an_observer_sees_every_decision_until_its_handle_is_removed():
    layer = make_layer(top_k=2).eval()
    seen = []
    handle = layer.add_routing_observer(lambda routing, lead: seen.append((routing.expert_idx.shape, tuple(lead))))
    layer(torch.randn(2, 3, 8))
    handle.remove()
    layer(torch.randn(2, 3, 8))
    assert seen == [((6, 2), (2, 3))]


def test_routing_mode_forces_every_layer_inside_the_block_and_restores_it():
    model = torch.nn.Sequential(make_layer(num_experts=4), make_layer(num_experts=4)).eval()
    model[1].set_routing_mode("forced", expert=1)
    with routing_mode(model, "forced", expert=3), record_routing(model) as rec:
        model(torch.randn(2, 5, 8))
    assert {tuple(r.expert_ids.unique().tolist()) for r in rec.values()} == {(3,)}
    assert [(m.routing_mode, m.forced_expert) for m in model] == [("routed", None), ("forced", 1)]
    with pytest.raises(ValueError, match="forced routing needs expert"), routing_mode(model, "forced", expert=4):
        pass
    assert model[0].routing_mode == "routed"
