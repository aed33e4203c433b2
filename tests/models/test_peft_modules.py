"""PEFT's adapters are modules of the model, not forward hooks: a block's FFN with an adapter in parallel computes
FFN(x) + adapter(x) in its own `forward` (so a copy, a compiled graph or a direct `forward` call includes it),
under the FFN's parameter names."""
import copy
import io

import pytest
import torch

from dgmoe.errors import UsageError
from dgmoe.models import create_model
from dgmoe.models.layers import Mlp
from dgmoe.models.peft import apply_peft
from dgmoe.moe.layer import MoEMlp
from dgmoe.peft.config import PeftConfig

TOY = dict(num_classes=3, img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=2)


@pytest.mark.parametrize("mode", ["adapter", "adapter_experts"])
def test_an_adapted_ffn_adds_its_adapter_in_its_own_forward_and_no_module_has_a_hook(mode):
    torch.manual_seed(0)
    model = create_model("vit_tiny_patch16_224", peft=PeftConfig(mode, blocks=(1,)), **TOY).eval()
    assert not [n for n, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]
    mlp = model.blocks[1].mlp
    assert type(mlp) is Mlp and mlp.adapter is not None and model.blocks[0].mlp.adapter is None
    with torch.no_grad():
        for p in mlp.adapter.parameters():  # the up-projection starts at zero: make the adapter count
            p.normal_()
    x = torch.randn(2, 5, 32)
    adapter = mlp.adapter(x)
    assert adapter.abs().sum() > 0
    bare = copy.deepcopy(mlp)
    bare.adapter = None
    torch.testing.assert_close(mlp.forward(x), bare(x) + adapter)  # no hook needed
    torch.testing.assert_close(copy.deepcopy(mlp).forward(x), mlp(x))


def test_the_adapted_ffn_keeps_its_parameter_names_and_a_sparse_ffn_stays_a_moe_layer():
    torch.manual_seed(0)
    model = create_model("gmoe_tiny_patch16_224", peft=PeftConfig("adapter", blocks=(0, 1)), moe_layers=[1], **TOY)
    names = set(model.state_dict())
    assert {"blocks.0.mlp.fc1.weight", "blocks.0.mlp.adapter.down.weight", "blocks.1.mlp.adapter.up.bias"} <= names
    assert not [n for n in names if ".base." in n or ".ffn." in n]
    assert type(model.blocks[1].mlp) is MoEMlp and model.blocks[1].mlp.adapter is not None


def test_an_adapted_model_pickles_and_copies_whole():
    torch.manual_seed(0)
    model = create_model("vit_tiny_patch16_224", peft=PeftConfig("adapter"), **TOY).eval()
    with torch.no_grad():
        model.blocks[0].mlp.adapter.up.weight.normal_()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(2, 3, 16, 16)
    assert type(loaded.blocks[0].mlp) is type(model.blocks[0].mlp)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_blocks_without_an_ffn_are_a_one_line_usage_error_for_the_adapter_modes():
    model = create_model("vit_tiny_patch16_224", **TOY)
    for block in model.blocks:
        del block.mlp
    with pytest.raises(UsageError, match="--peft adapter adds adapters beside the blocks' FFN"):
        apply_peft(model, PeftConfig("adapter"))
