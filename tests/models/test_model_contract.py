"""The contract every registered model keeps (a new model is checked by default): built at toy size, it
describes itself as the meta-device description says, takes its declared input, returns finite logits for its
classes through its declared classifier, and its sparse layers (and only a sparse model's) return named
auxiliary losses after a training forward."""
import pytest
import torch
import torch.nn as nn
from toy_models import NUM_CLASSES, inputs, toy_kwargs

from dgmoe.models import MODELS, create_model
from dgmoe.models.info import describe_model, model_info
from dgmoe.moe.auxiliary import AUX_LOSSES, aux_losses, sparse_layers


@pytest.mark.parametrize("name", MODELS.names())
def test_registered_model_keeps_the_contract(name):
    torch.manual_seed(0)
    kwargs = toy_kwargs(name)
    model = create_model(name, **kwargs)
    info = model_info(model)
    assert describe_model(name, **kwargs) == info  # what hparams and transforms read before building
    assert info.input_size[1:] == (32, 32)
    head = getattr(model, info.classifier)
    assert isinstance(head, nn.Linear) and head.out_features == NUM_CLASSES and head is model.get_classifier()
    assert head.in_features == info.num_features
    x, meta = inputs(info)
    model.train()
    features = model.forward_features(x, meta=meta) if info.uses_metadata else model.forward_features(x)
    logits = model.forward_head(features)
    assert logits.shape == (2, NUM_CLASSES) and torch.isfinite(logits).all()
    layers = sparse_layers(model)
    assert info.is_sparse == bool(layers) and len(info.sparse_blocks) == len(layers)
    terms = aux_losses(model)
    if info.is_sparse:
        assert terms and set(terms) <= set(AUX_LOSSES)
        assert all(t.ndim == 0 and torch.isfinite(t) for t in terms.values())
        assert all(layer.config == info.sparse for layer in layers.values())
    else:
        assert terms == {}
    (logits.sum() + sum(terms.values(), torch.zeros(()))).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
