"""`dgmoe models`: every registered model with its parameter count and a description (family, sparse layout,
paper), read from meta-device builds (no weights)."""
import pytest

from dgmoe.models import MODELS, count_parameters, create_model
from dgmoe.models.info import build_on_meta, describe_model
from dgmoe.models.summary import compact_layout, family_of, summarize_model


@pytest.mark.parametrize("layout,expected", [
    ("F" * 8 + "SFSF", "[F]x8,[S,F]x2"), ("SF" * 6, "[S,F]x6"), ("S" * 12, "[S]x12"), ("FFS", "[F]x2,S"),
    ("SFFS", "S,[F]x2,S"),
])
def test_layouts_are_written_in_the_papers_notation(layout, expected):
    assert compact_layout(tuple(layout)) == expected


@pytest.mark.parametrize("name", ["vit_micro_patch7_28", "gmoe_micro_patch7_28", "resnet50"])
def test_meta_counts_equal_the_built_models(name):
    assert all(p.is_meta for p in build_on_meta(name).parameters())
    assert summarize_model(name).num_params == count_parameters(create_model(name))


def test_descriptions_name_family_layout_routing_and_paper():
    assert summarize_model("gmoe_small_patch16_224").description == (
        "GMoE: 12 blocks, width 384, MoE in last-two blocks (8, 10 of 12), 6 experts top-2 cosine; "
        "Li et al., ICLR 2023")
    assert summarize_model("sfmoe_small_patch16_224").structure.endswith(
        "blocks [S,F]x6 (S: MoE), 6 experts top-2 linear")
    assert "6 experts top-3 cosine routed per image on location + a shared expert" in \
        summarize_model("moge_tiny_patch16_224").structure
    assert summarize_model("resnet101").description == "ResNet-101: bottleneck stages 3-4-23-3; He et al., CVPR 2016"
    assert summarize_model("vit_tiny_patch16_224").structure == "12 blocks, width 192, dense"
    assert summarize_model("vit_small_patch16_224").num_params == 22_050_664  # timm's vit_small_patch16_224


def test_every_registered_model_has_a_family_and_paper():
    unknown = [name for name in MODELS.names() if family_of(name)[0] == "?"]
    assert not unknown


def test_a_new_family_is_described_by_its_model_info():
    from dgmoe.models.info import describe_model

    assert family_of("newnet_tiny", describe_model("gmoe_micro_patch7_28")) == ("sparse ViT", "")
    assert family_of("newnet_tiny", describe_model("vit_micro_patch7_28")) == ("ViT", "")
    assert family_of("newnet_tiny", describe_model("moge_tiny_patch16_224"))[0] == "metadata-routed sparse ViT"


def test_cli_lists_every_model_with_counts_and_descriptions(cli):
    result = cli("models")
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert lines[0].split() == ["model", "params", "input", "description"] and len(lines) == 1 + len(MODELS)
    gmoe = next(line for line in lines if line.startswith("gmoe_micro_patch7_28 "))
    assert "1.58M" in gmoe and "28 px" in gmoe and "MoE in last-two blocks (2, 4 of 6)" in gmoe


def test_cli_pattern_and_bare_names(cli):
    assert cli("models", "resnet*", "--names").output.split() == ["resnet101", "resnet50"]
    result = cli("models", "nothing*")
    assert result.exit_code == 0 and "no registered model matches 'nothing*'" in result.output


@pytest.mark.parametrize("name, peer_count", [
    # timm 1.0.31's towers (num_classes=0; CLIP: + the bias-free projection), meta builds
    ("vit_base_patch16_clip_224", 86_192_640), ("vit_large_patch14_clip_quickgelu_224", 303_966_208),
    ("vit_small_patch14_dinov2", 21_628_800), ("vit_base_patch14_reg4_dinov2", 85_727_232),
])
def test_foundation_towers_count_what_the_peers_count(name, peer_count):
    assert count_parameters(build_on_meta(name, num_classes=0)) == peer_count


def test_foundation_towers_and_their_sparse_variants_are_listed_with_tower_and_paper(cli):
    assert summarize_model("vit_base_patch16_clip_quickgelu_224").description == (
        "CLIP ViT-B/16 (OpenAI, QuickGELU): 12 blocks, width 768, dense; Radford et al., ICML 2021")
    assert summarize_model("gmoe_small_patch14_reg4_dinov2").description.startswith(
        "GMoE on DINOv2 ViT-S/14 with 4 registers: 12 blocks, width 384, MoE in last-two blocks (8, 10 of 12)")
    names = cli("models", "*clip*", "--names").output.split() + cli("models", "*dinov2*", "--names").output.split()
    assert {"vit_large_patch14_clip_224", "gmoe_base_patch16_clip_quickgelu_224", "sfmoe_base_patch14_dinov2",
            "gmoe_base_patch14_dinov2", "vit_small_patch14_reg4_dinov2"} <= set(names)


def test_foundation_stand_ins_are_test_sized_towers_of_their_family():
    """The recipes' smoke scale swaps CLIP and DINOv2 towers for these: 28 px, the family's own options, and
    `dgmoe models` says they are stand-ins."""
    import torch.nn as nn

    from dgmoe.models.info import model_info
    from dgmoe.recipes.plan import SMOKE

    clip = create_model("vit_micro_patch7_clip_quickgelu_28", num_classes=3)
    info = model_info(clip)
    assert (info.input_size, info.activation, info.num_features) == ((3, 28, 28), "quick_gelu", 32)
    assert isinstance(clip.norm_pre, nn.LayerNorm) and clip.patch_embed.proj.bias is None and clip.proj is not None
    assert model_info(create_model("vit_micro_patch7_clip_28", num_classes=3)).activation == "gelu"
    dino = create_model("vit_micro_patch7_reg4_dinov2", num_classes=3)
    assert model_info(dino).num_prefix_tokens == 5 and float(dino.blocks[0].ls1.gamma.max()) == pytest.approx(1e-5)
    assert model_info(create_model("vit_micro_patch7_dinov2", num_classes=3)).num_prefix_tokens == 1
    assert [SMOKE.model(n) for n in ("vit_base_patch16_clip_quickgelu_224", "vit_large_patch14_clip_224",
                                     "vit_base_patch14_dinov2", "vit_small_patch14_reg4_dinov2", "resnet50")] == [
        "vit_micro_patch7_clip_quickgelu_28", "vit_micro_patch7_clip_28", "vit_micro_patch7_dinov2",
        "vit_micro_patch7_reg4_dinov2", "vit_micro_patch7_28"]
    assert summarize_model("vit_micro_patch7_dinov2").description.endswith("test-sized stand-in, no weights")
    # GMoE on a CLIP tower: the stand-in's GMoE twin (its dense twin the stand-in), GMoE's last-two layout
    assert [SMOKE.model(n) for n in ("gmoe_base_patch16_clip_quickgelu_224", "gmoe_large_patch14_clip_224",
                                     "gmoe_small_patch14_dinov2", "gmoe_small_patch16_224")] == [
        "gmoe_micro_patch7_clip_quickgelu_28", "gmoe_micro_patch7_clip_28", "gmoe_micro_patch7_28",
        "gmoe_micro_patch7_28"]
    twin = describe_model("gmoe_micro_patch7_clip_quickgelu_28", num_classes=3)
    assert twin.is_sparse and twin.activation == "quick_gelu" and twin.num_features == 32
    assert twin.tower == model_info(clip).tower
    def sparse(name):
        return [i for i, b in enumerate(create_model(name, num_classes=3).blocks) if hasattr(b.mlp, "experts")]
    assert sparse("gmoe_micro_patch7_clip_quickgelu_28") == sparse("gmoe_micro_patch7_28") != []
