"""Routing records (dgmoe.moe.record): nothing recorded, and nothing paid, while recording is off."""

from moe_layers import make_layer

from dgmoe.moe import record_routing


def test_routing_record_costs_nothing_when_off():
    layer = make_layer()
    assert layer._routing_sink is None
    with record_routing(layer):
        assert layer._routing_sink is not None
    assert layer._routing_sink is None
