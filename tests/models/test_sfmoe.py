"""SF-MoE: the block-layout grammar, sparse/fusion models and the hybrid ResNet patch embedding."""
import pytest
import torch

import dgmoe
from dgmoe.models.layout import LayoutError, parse_layout, resolve_layout, sparse_blocks
from dgmoe.moe import MoEMlp

SMALL32 = dict(img_size=32, patch_size=4, num_classes=7)


@pytest.mark.parametrize("spec,expected_sparse", [
    ("[S,F]x6", (0, 2, 4, 6, 8, 10)),
    ("[S]x12", tuple(range(12))),
    ("[F]x8,[S,F]x2", (8, 10)),
    ("[F]x12", ()),
    ("F,F,[S]x2, [F , S]x4", (2, 3, 5, 7, 9, 11)),
])
def test_grammar_parses_the_papers_layouts(spec, expected_sparse):
    layout = parse_layout(spec)
    assert len(layout) == 12 and sparse_blocks(layout) == expected_sparse


@pytest.mark.parametrize("spec,position", [
    ("[S,F]x6,", 8), ("[S,Q]x6", 3), ("[S,F]x6 [S]", 8), ("[S,F", 0), ("", 0), ("[S,F]x0", 5), ("Sx2", 1),
])
def test_grammar_rejects_malformed_layouts_with_the_position(spec, position):
    with pytest.raises(LayoutError) as err:
        parse_layout(spec)
    assert err.value.position == position
    assert f"position {position}" in str(err.value)


def test_gmoe_placements_are_layouts_too():
    assert resolve_layout("last-two", 12) == parse_layout("[F]x8,[S,F]x2")
    assert resolve_layout("every-two", 12) == parse_layout("[S,F]x6")
    with pytest.raises(ValueError, match="has 6 blocks but the model has depth 12"):
        resolve_layout("[S,F]x3", 12)
    with pytest.raises(ValueError, match=r"'last-two' MoE layout .* needs depth >= 4, got depth 2; .* e.g. \[1\]"):
        resolve_layout("last-two", 2)
    with pytest.raises(ValueError, match=r"MoE block indices \[5\] are outside 0..3"):
        resolve_layout([1, 5], 4)


@pytest.mark.parametrize("layout,n_sparse", [("[S,F]x6", 6), ("[S]x12", 12), ("[F]x12", 0), ("[F]x8,[S,F]x2", 2)])
def test_block_and_parameter_counts_per_layout(layout, n_sparse):
    dense = dgmoe.create_model("vit_small_patch16_224", **SMALL32)
    model = dgmoe.create_model("sfmoe_small_patch16_224", moe_layers=layout, num_experts=8, **SMALL32)
    sparse = [b for b in model.blocks if isinstance(b.mlp, MoEMlp)]
    assert len(sparse) == n_sparse and len(model.blocks) == 12
    ffn = 384 * 1536 + 1536 + 1536 * 384 + 384
    router = 384 * 8  # linear router, no bias
    expected = dgmoe.count_parameters(dense) + n_sparse * (7 * ffn + router)
    assert dgmoe.count_parameters(model) == expected


def test_sfmoe_router_is_linear_top2_with_noise_one_over_n():
    model = dgmoe.create_model("sfmoe_small_patch16_224", **SMALL32)
    cfg = model.blocks[0].mlp.config
    assert (cfg.router, cfg.top_k, cfg.num_experts, cfg.gate_noise_std) == ("linear", 2, 6, 1 / 6)
    assert model.info.sparse_blocks == (0, 2, 4, 6, 8, 10) and model.info.sparse.router == "linear"


@pytest.mark.parametrize("img", [32, 64, 96, 224])
def test_hybrid_forward_shapes_for_several_image_sizes(img):
    model = dgmoe.create_model("hybrid_sfmoe_small_r26_s32_224", num_classes=5, img_size=img, depth=2,
                               moe_layers="[S,F]x1")
    grid = -(-img // 32)
    assert model.patch_embed.grid_size == (grid, grid)
    tokens = model.forward_features(torch.randn(2, 3, img, img))
    assert tokens.shape == (2, grid * grid + 1, 384)
    assert model.forward_head(tokens).shape == (2, 5)


def test_hybrid_uses_timm_parameter_names():
    keys = set(dgmoe.create_model("vit_small_r26_s32_224", num_classes=5, img_size=64).state_dict())
    for key in ("patch_embed.backbone.stem.conv.weight", "patch_embed.backbone.stem.norm.weight",
                "patch_embed.backbone.stages.0.blocks.0.downsample.conv.weight",
                "patch_embed.backbone.stages.3.blocks.1.norm3.bias", "patch_embed.proj.weight", "cls_token"):
        assert key in keys
    assert not any(k.startswith("patch_embed.backbone.stages.4") for k in keys)


def test_hybrid_sfmoe_loads_a_dense_hybrid_checkpoint_strictly(tmp_path):
    from safetensors.torch import save_file

    dense = dgmoe.create_model("vit_small_r26_s32_224", num_classes=5, img_size=64)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(tmp_path / "r26.safetensors"))
    model = dgmoe.create_model("hybrid_sfmoe_small_r26_s32_224", num_classes=5, img_size=64,
                               pretrained=str(tmp_path / "r26.safetensors"))
    assert len(model.info.load_report.expanded) == 6
    assert torch.equal(model.patch_embed.backbone.stem.conv.weight, dense.patch_embed.backbone.stem.conv.weight)


def test_hybrid_equals_timm_with_same_weights():
    timm = pytest.importorskip("timm", reason="timm does not import here (it needs a working torchvision)")
    ref = timm.create_model("vit_small_r26_s32_224", pretrained=False, num_classes=7).eval()
    ours = dgmoe.create_model("vit_small_r26_s32_224", num_classes=7).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, 3, 224, 224)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kernel,stride,size", [(1, 1, 9), (3, 1, 9), (3, 1, 8), (3, 2, 8), (3, 2, 9), (7, 2, 10),
                                                (1, 2, 8)])
def test_std_conv_is_weight_standardisation_with_tf_same_padding(kernel, stride, size):
    from dgmoe.models.hybrid import StdConv2dSame, same_padding

    conv = StdConv2dSame(4, 6, kernel, stride=stride)
    torch.nn.init.normal_(conv.weight, mean=0.3, std=2.0)
    x = torch.randn(2, 4, size, size)
    flat = conv.weight.double().reshape(6, -1)
    w = (flat - flat.mean(1, keepdim=True)) / torch.sqrt(flat.var(1, unbiased=False, keepdim=True) + 1e-8)
    top, bottom = same_padding(size, kernel, stride)
    expected = torch.nn.functional.conv2d(torch.nn.functional.pad(x.double(), (top, bottom, top, bottom)),
                                          w.reshape_as(conv.weight), stride=stride)
    out = conv(x)
    assert out.shape[-1] == -(-size // stride)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
