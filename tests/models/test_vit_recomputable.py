"""Activation checkpointing (`dgmoe.models.vit.recomputable`): the recomputation in backward runs in the
forward's scope (shard, MoGE routing context) and does not record the sparse layers' auxiliary terms a second
time, so a checkpointed model trains exactly as the same model without checkpointing."""
import torch
import torch.nn as nn

import dgmoe.models.vit as vit_module
from dgmoe.models import create_model
from dgmoe.moe import aux_losses, clear_aux, sparse_layers
from dgmoe.scope import SCOPE, scoped


class Spy(nn.Module):
    """A block that notes the scope each call runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen: list[tuple[object, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((SCOPE.routing_context, SCOPE.record_aux))
        return self.lin(x)


def test_the_recomputation_runs_in_the_forwards_scope_without_recording():
    spy, context = Spy(), torch.ones(2, 3)
    x = torch.randn(2, 4, requires_grad=True)
    with scoped(routing_context=context):
        y = torch.utils.checkpoint.checkpoint(vit_module.recomputable(spy), x, use_reentrant=False)
    y.sum().backward()  # the recomputation: after the `with` block closed
    assert [(c is context, record) for c, record in spy.seen] == [(True, True), (True, False)]
    assert SCOPE.routing_context is None and SCOPE.record_aux


def _train_step(checkpointing: bool):
    torch.manual_seed(0)
    model = create_model("gmoe_micro_patch7_28", num_classes=3).train()
    model.set_grad_checkpointing(checkpointing)
    clear_aux(model)
    torch.manual_seed(1)
    x = torch.randn(4, 3, 28, 28)
    # without early stop the recomputation runs every block to its end (with it, torch stops a recomputation
    # once the saved tensors are back, which can hide a second recording)
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        loss = model(x).logsumexp(-1).mean() + aux_losses(model)["balance"]
        loss.backward()
    counts = [int(layer._aux_forwards) for layer in sparse_layers(model).values()]
    return counts, aux_losses(model)["balance"].detach(), {n: p.grad for n, p in model.named_parameters()}


def test_checkpointing_counts_each_layers_auxiliary_terms_once_and_trains_alike():
    counts, balance, grads = _train_step(True)
    ref_counts, ref_balance, ref_grads = _train_step(False)
    assert counts == ref_counts == [1, 1]
    torch.testing.assert_close(balance, ref_balance)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(grads[name], grad, msg=name)


def test_without_the_guard_the_recomputation_would_count_twice(monkeypatch):
    monkeypatch.setattr(vit_module, "recomputable", lambda block: block)
    counts, _, _ = _train_step(True)
    assert counts == [2, 2]  # what the guard prevents
