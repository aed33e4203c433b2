"""Routing records (dgmoe.moe.record): nothing recorded, and nothing paid, while recording is off."""

from moe_layers import make_layer

from dgmoe.moe import record_routing


def test_routing_record_costs_nothing_when_off():
    layer = make_layer()
    assert not layer._routing_observers
    with record_routing(layer):
        assert len(layer._routing_observers) == 1
    assert not layer._routing_observers
