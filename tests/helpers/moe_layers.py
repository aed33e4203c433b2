"""Micro MoE layers for the tests of `dgmoe.moe`: one per dispatch option, plus the internal paths the tests
hold against the mask reference."""
import torch

from dgmoe.moe import MoEConfig, MoEMlp
from dgmoe.moe.dispatch import sorted_autograd_dispatch
from dgmoe.moe.fixed_shape import fixed_shape_dispatch
from dgmoe.moe.sync_free import sync_free_dispatch

#: the layer's dispatch options, plus the paths the tests hold against the mask reference
PATHS = {"grouped": None, "mask": None, "grouped_autograd": sorted_autograd_dispatch,
         "fixed_shape": fixed_shape_dispatch,
         "sync_free": sync_free_dispatch}


def make_layer(dispatch="grouped", activation="gelu", **kw):
    torch.manual_seed(1)
    return MoEMlp(8, 32, MoEConfig(dispatch=dispatch if PATHS.get(dispatch) is None else "grouped", **kw),
                  activation=activation, dispatch_override=PATHS.get(dispatch))


def outputs_and_grads(dispatch, x, **kw):
    layer = make_layer(dispatch=dispatch, **kw).to(x.device).train()
    torch.manual_seed(5)  # same gate noise for every path
    x = x.detach().clone().requires_grad_(True)
    y = layer(x)
    (y * torch.linspace(-1, 1, y.numel(), device=x.device).view_as(y)).sum().backward()
    return y.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters()}

