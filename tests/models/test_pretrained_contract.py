"""The dense-to-sparse contract every registered sparse model keeps (a new one is checked by default): built from
a checkpoint of its dense twin (written here), it loads strictly what the checkpoint holds, initialises and
reports what a dense checkpoint cannot hold (routers, MoGE's gate logit and location encoder, ...), and, where
the paper makes them equal at initialisation, computes the dense model's output: experts (and MoGE's shared
expert) are copies of the FFN and the combine weights sum to one (renormalised top-k, dropless), so GMoE's
y = sum_k g_k f(x) (App. C.2) and MoGE's gamma f_0(x) + (1 - gamma) sum_k alpha_k f_k(x) (eq. 1) are f(x)."""
import pytest
import torch
from safetensors.torch import save_file
from toy_models import inputs, toy_kwargs

import dgmoe
from dgmoe.models import MODELS
from dgmoe.models.info import describe_model, model_info
from dgmoe.models.pretrained import CheckpointMismatchError
from dgmoe.models.twin import dense_twin, write_dense_checkpoint
from dgmoe.moe.auxiliary import sparse_layers

SPARSE = [n for n in MODELS.names() if describe_model(n).is_sparse]
#: every model that declares a dense twin (the sparse ones, and ERM+LE, a ViT with a location embedding)
TWINNED = [n for n in MODELS.names() if describe_model(n).dense_twin]


def test_every_sparse_model_declares_a_registered_dense_twin():
    assert SPARSE
    for name in SPARSE:
        twin = describe_model(name).dense_twin
        assert twin in MODELS and not describe_model(twin).is_sparse and not describe_model(twin).dense_twin, name


def _twin_and_model(name, tmp_path, suffix=".pth", **extra):
    """The dense twin (seed 0) and `name` built from its checkpoint, at the contract's toy size."""
    kwargs = {**toy_kwargs(name), **extra}
    path = write_dense_checkpoint(tmp_path / f"twin{suffix}", name, seed=0, **kwargs)
    twin_name, twin_kwargs = dense_twin(name, **kwargs)
    torch.manual_seed(0)
    twin = dgmoe.create_model(twin_name, **twin_kwargs)
    torch.manual_seed(1)
    model = dgmoe.create_model(name, pretrained=str(path), **kwargs)
    torch.manual_seed(1)
    scratch = dgmoe.create_model(name, **kwargs)  # the same model's own initialisation
    return twin, model, scratch


@pytest.mark.parametrize("name", TWINNED)
def test_model_loads_its_dense_twins_checkpoint_and_reports_what_it_initialised(name, tmp_path):
    twin, model, scratch = _twin_and_model(name, tmp_path)
    report, dense = model.info.load_report, twin.state_dict()
    layers = list(sparse_layers(model))
    assert report.expanded == layers and not report.resized
    if model_info(model).is_sparse:
        assert {f"{layer}.router" for layer in layers} <= set(report.initialised)
    for key, value in model.state_dict().items():
        named = [n for n in report.initialised if key == n or key.startswith(n + ".")]
        layer = next((n for n in layers if key.startswith(n + ".")), None)
        if named:  # initialised: the model's own value, and nothing a dense checkpoint holds
            assert torch.equal(value, scratch.state_dict()[key]) and key not in dense, key
        elif key in report.reinitialized:
            assert key in dense
        elif layer is not None:  # an expert or the shared expert: a copy of the dense FFN
            part, param = key[len(layer) + 1:].split(".", 1)
            src = dense[f"{layer}.{param.replace('_weight', '.weight').replace('_bias', '.bias')}"]
            assert torch.equal(value, src.expand_as(value)) and part in ("experts", "shared"), key
        else:
            assert torch.equal(value, dense[key]), key


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("train", [False, True])
def test_sparse_model_from_its_dense_twin_computes_the_dense_output(name, train, tmp_path):
    cfg = describe_model(name).sparse
    assert cfg is not None and cfg.renormalize and cfg.capacity_factor is None  # the defaults that make them equal
    twin, model, _ = _twin_and_model(name, tmp_path, suffix=".safetensors")
    assert not model.info.load_report.reinitialized  # the same class count: the head is the twin's
    twin.train(train), model.train(train)
    torch.manual_seed(2)
    x, meta = inputs(model_info(model))
    out = model(x, meta=meta) if meta is not None else model(x)
    torch.testing.assert_close(out, twin(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("twin", ["vit_tiny_patch16_224", "deit_tiny_patch16_224"])
@pytest.mark.parametrize("fmt", ["timm.pth", "timm.safetensors", "deit.pth"])
def test_moge_starts_from_a_vit_or_deit_checkpoint_in_timm_and_deit_formats(twin, fmt, tmp_path):
    """A MoGE from a dense checkpoint saved as timm does (a bare state dict) or as DeiT's
    releases (`{'model': state_dict}`), with another class count."""
    kwargs = dict(img_size=32, patch_size=8, embed_dim=32, num_heads=2)
    state = dgmoe.create_model(twin, num_classes=1000, **kwargs).state_dict()
    path = tmp_path / f"dense.{fmt.split('.')[1]}"
    if fmt == "timm.safetensors":
        save_file(state, str(path))
    else:
        torch.save({"model": state} if fmt.startswith("deit") else state, path)
    model = dgmoe.create_model("moge_tiny_patch16_224", num_classes=7, pretrained=str(path), **kwargs)
    report = model.info.load_report
    assert report.expanded == ["blocks.8.mlp", "blocks.10.mlp"] and report.reinitialized == ["head.weight", "head.bias"]
    assert report.initialised == ["blocks.8.mlp.gamma_logit", "blocks.8.mlp.router", "blocks.10.mlp.gamma_logit",
                                  "blocks.10.mlp.router", "location_encoder"]
    assert "initialised, not in the checkpoint: blocks.8.mlp.gamma_logit" in report.summary()
    torch.testing.assert_close(model.blocks[8].mlp.gamma, torch.tensor(0.5))  # gamma_init (eq. 1)


def _without(state: dict, key: str) -> dict:
    return {k: v for k, v in state.items() if k != key}


def test_what_a_dense_checkpoint_can_hold_stays_strict(tmp_path):
    kwargs = toy_kwargs("moge_tiny_patch16_224")
    dense = dict(dgmoe.create_model("vit_tiny_patch16_224", **kwargs).state_dict())
    sparse = dict(dgmoe.create_model("moge_tiny_patch16_224", **kwargs).state_dict())
    encoder = next(k for k in sparse if k.startswith("location_encoder."))
    cases = {"norm": (dense, "blocks.3.norm1.weight"), "ffn": (dense, "blocks.8.mlp.fc2.bias"),
             # a sparse checkpoint holds the routers, and part of a location encoder is not "no location encoder"
             "router": (sparse, "blocks.8.mlp.router.codebook"), "encoder": (sparse, encoder)}
    for case, (state, key) in cases.items():
        torch.save(_without(state, key), tmp_path / f"{case}.pth")
        with pytest.raises(CheckpointMismatchError, match=f"missing key '{key}'"):
            dgmoe.create_model("moge_tiny_patch16_224", pretrained=str(tmp_path / f"{case}.pth"), **kwargs)
