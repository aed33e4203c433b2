"""`dgmoe.moe.auxiliary`: each named term combined over the sparse layers as `AUX_LOSSES` declares (balance
summed, GMoE App. C.4; CKA averaged, MoGE eq. 2), weighted by its hyperparameter, each forward counted once."""
import pytest
import torch
import torch.nn as nn
from moe_layers import make_layer

from dgmoe.moe import AUX_LOSS_WEIGHTS, aux_losses, clear_aux, sparse_layers, weighted_aux_loss


def _two_layers(**kw) -> nn.Module:
    return nn.Sequential(make_layer(num_experts=4, top_k=2, **kw), make_layer(num_experts=4, top_k=2, **kw)).train()


def test_terms_combine_as_declared_over_the_layers():
    model = _two_layers(cka_tokens=4)
    model(torch.randn(2, 5, 8))
    per_layer = [layer.aux_losses() for layer in sparse_layers(model).values()]
    combined = aux_losses(model)
    torch.testing.assert_close(combined["balance"], per_layer[0]["balance"] + per_layer[1]["balance"])
    torch.testing.assert_close(combined["cka"], (per_layer[0]["cka"] + per_layer[1]["cka"]) / 2)


def test_several_forwards_average_and_clear_forgets():
    model = _two_layers(noise_std=0.0)  # the same input gives the same terms
    x1, x2 = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    model(x1)
    first = aux_losses(model)["balance"]
    model(x2)
    both = aux_losses(model)["balance"]
    clear_aux(model)
    assert aux_losses(model) == {}
    model(x2)
    torch.testing.assert_close(both, (first + aux_losses(model)["balance"]) / 2)


def test_weighted_loss_needs_each_terms_weight():
    model = _two_layers()
    model(torch.randn(2, 5, 8))
    weight = AUX_LOSS_WEIGHTS["balance"]
    torch.testing.assert_close(weighted_aux_loss(model, {weight: 0.5}), 0.5 * aux_losses(model)["balance"])
    with pytest.raises(KeyError, match=weight):
        weighted_aux_loss(model, {})
    assert weighted_aux_loss(nn.Linear(2, 2), {}).item() == 0.0
