"""Parameter-efficient models (`dgmoe.models.peft`): unchanged at initialisation, LoRA's update as its equation,
checkpoints that hold the trainable weights only and name their base, a few MB for ViT-B."""
import dataclasses
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dgmoe.engine.checkpoint import build_network, load_run, save_weights
from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError
from dgmoe.models import create_model
from dgmoe.models.info import build_on_meta, describe_model
from dgmoe.models.peft import LoRALinear, RoutedAdapterLinear, parameter_counts, trainable_names
from dgmoe.moe.adapter_experts import KroneckerExperts, LoRAExperts
from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.moe.layer import MoEMlp
from dgmoe.peft.config import PEFT_MODES, PeftConfig

TOY = dict(num_classes=3, img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=2)
MODES = [m for m in PEFT_MODES if m != "full"]


def toy(peft=None, name="vit_tiny_patch16_224", **kw):
    torch.manual_seed(0)
    return create_model(name, peft=peft, **{**TOY, **kw})


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "gmoe_tiny_patch16_224"])
@pytest.mark.parametrize("mode", [m for m in MODES if m != "moa"])  # MoA's Kronecker experts start non-zero
def test_a_peft_model_computes_its_base_model_at_initialisation(mode, name):
    x = torch.randn(2, 3, 16, 16)
    extra = {"moe_layers": [1]} if name.startswith("gmoe") else {}
    base, peft = toy(None, name, **extra).eval(), toy(PeftConfig(mode), name, **extra).eval()
    assert torch.allclose(base(x), peft(x), atol=1e-6)
    total, trainable = parameter_counts(peft)
    assert 0 < trainable < total and trainable == sum(p.numel() for n, p in peft.named_parameters()
                                                      if n in set(trainable_names(peft)))


def test_lora_computes_w_x_plus_alpha_over_r_b_a_x():
    layer = LoRALinear(torch.nn.Linear(6, 5), rank=2, alpha=3.0)
    torch.nn.init.normal_(layer.lora_B)
    x = torch.randn(4, 6)
    expected = x @ layer.weight.T + layer.bias + (3.0 / 2) * (x @ layer.lora_A.T @ layer.lora_B.T)
    assert torch.allclose(layer(x), expected, atol=1e-6)
    assert set(dict(layer.named_parameters())) == {"weight", "bias", "lora_A", "lora_B"}


def test_lora_targets_and_blocks_choose_the_projections():
    model = toy(PeftConfig("lora", targets="proj,fc1", blocks=(1,)))
    lora = sorted(n for n, m in model.named_modules() if isinstance(m, LoRALinear))
    assert lora == ["blocks.1.attn.proj", "blocks.1.mlp.fc1"]
    gmoe = toy(PeftConfig("lora", targets="proj"), "gmoe_tiny_patch16_224", moe_layers=[1])
    assert not any(isinstance(m, LoRALinear) for n, m in gmoe.named_modules() if ".router" in n)


def test_adapter_experts_are_routed_sparse_layers_in_gmoes_last_two_blocks_by_default():
    model = toy(PeftConfig("adapter_experts", num_experts=3, top_k=2, router="linear"), depth=6)
    layers = sparse_layers(model)
    assert sorted(layers) == ["blocks.2.mlp.adapter", "blocks.4.mlp.adapter"]
    layer = layers["blocks.4.mlp.adapter"]
    assert isinstance(layer, MoEMlp) and layer.config.num_experts == 3 and layer.config.top_k == 2
    assert describe_model("vit_tiny_patch16_224", peft={"mode": "adapter_experts"}).routes_tokens


def test_bad_settings_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="--peft-top-k"):
        PeftConfig("adapter_experts", num_experts=2, top_k=3)
    with pytest.raises(UsageError, match="--peft-blocks 5"):
        toy(PeftConfig("adapter", blocks=(5,)))
    with pytest.raises(UsageError, match="--peft lora adapts transformer blocks"):
        build_on_meta("resnet50", num_classes=3, peft="lora")
    assert parameter_counts(build_on_meta("resnet50", num_classes=3, peft="linear"))[1] == 2048 * 3 + 3


def test_moa_wraps_every_second_blocks_qkv_and_starts_close_to_its_base():
    """MoA's KAdaptation experts are Glorot-initialised around a U(-0.01, 0.01) rule: not zero, but small."""
    x = torch.randn(2, 3, 16, 16)
    base, moa = toy(None, depth=4).eval(), toy(PeftConfig("moa"), depth=4).eval()
    wrapped = sorted(n for n, m in moa.named_modules() if isinstance(m, RoutedAdapterLinear))
    assert wrapped == ["blocks.0.attn.qkv", "blocks.2.attn.qkv"]
    assert sorted(sparse_layers(moa)) == ["blocks.0.attn.qkv.adapter", "blocks.2.attn.qkv.adapter"]
    layer = sparse_layers(moa)["blocks.0.attn.qkv.adapter"]
    assert isinstance(layer.experts, KroneckerExperts) and layer.experts.ranks == (1, 2, 4, 8)
    assert layer.config.top_k == 1 and layer.config.load_loss == "moa" and layer.config.router == "cosine"
    diff = (base(x) - moa(x)).abs().max()
    assert 0 < diff < 1e-2 and describe_model("vit_tiny_patch16_224", peft={"mode": "moa"}).routes_tokens


def test_lora_experts_of_one_rank_each_on_any_timm_linear_start_at_their_base():
    x = torch.randn(2, 3, 16, 16)
    peft = PeftConfig("adapter_experts", expert="lora", expert_ranks=(1, 3), num_experts=2, targets="qkv,fc2",
                      blocks=(1,))
    base, model = toy(None).eval(), toy(peft).eval()
    assert sorted(n for n, m in model.named_modules() if isinstance(m, RoutedAdapterLinear)) == [
        "blocks.1.attn.qkv", "blocks.1.mlp.fc2"]
    bank = sparse_layers(model)["blocks.1.mlp.fc2.adapter"].experts
    assert isinstance(bank, LoRAExperts) and [a.shape[0] for a in bank.lora_A] == [1, 3]
    assert torch.allclose(base(x), model(x), atol=1e-6)  # B = 0: LoRA experts start at the base model
    with pytest.raises(UsageError, match="--peft-expert-ranks gives 2 ranks"):
        PeftConfig("adapter_experts", expert="lora", expert_ranks=(1, 3), num_experts=4)


@pytest.mark.parametrize("mode", MODES)
def test_a_vit_base_peft_checkpoint_is_a_few_mb(mode):
    """The trainable weights of ViT-B/16 at DomainNet's 345 classes, in fp32: what a PEFT checkpoint holds
    (MoA's: six 197k-parameter cosine routers besides its experts, 7 MB)."""
    model = build_on_meta("vit_base_patch16_224", num_classes=345, peft={"mode": mode})
    total, trainable = parameter_counts(model)
    assert total > 86e6 and trainable * 4 < (8 if mode == "moa" else 6) * 2**20, (mode, trainable)


@pytest.mark.parametrize("peft", [{"mode": "adapter_experts", "bottleneck": 4, "num_experts": 2, "top_k": 1},
                                  {"mode": "moa"}], ids=["adapter_experts", "moa"])
def test_a_peft_checkpoint_holds_the_trainable_weights_and_names_its_base(tmp_path, peft):
    base_file = tmp_path / "base.safetensors"
    save_file({k: v.contiguous() for k, v in toy().state_dict().items()}, str(base_file))
    kwargs = {**TOY, "num_classes": 5, "peft": peft}
    model = create_model("vit_tiny_patch16_224", pretrained=str(base_file), **kwargs)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.1)
    run = tmp_path / "run"
    run.mkdir()
    cfg = RunConfig.from_flat(model="vit_tiny_patch16_224", patch_size=4, pretrained=str(base_file),
                              model_kwargs={k: TOY[k] for k in ("depth", "embed_dim", "num_heads")})
    cfg = dataclasses.replace(cfg, peft=PeftConfig.from_dict(peft))
    (run / "config.json").write_text(json.dumps({"config": cfg.to_dict(), "hparams": {}, "dataset": {
        "classes": list("abcde"), "input_shape": [3, 16, 16]}}))
    save_weights(model, run / "model.safetensors", {"step": "3"})
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert keys == set(trainable_names(model)) and keys < set(model.state_dict())
    assert meta["base_model"] == "vit_tiny_patch16_224" and meta["base_pretrained"] == str(base_file)
    assert len(meta["base_sha256"]) == 64 and "peft" not in meta  # its PEFT settings: the run's config.json
    loaded, _ = load_run(run, "last")
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(loaded(x), model.eval()(x))
    base_file.write_bytes(base_file.read_bytes() + b" ")  # another file at the path
    with pytest.raises(UsageError, match="not those the run was trained from"):
        load_run(run, "last")
    base_file.unlink()
    with pytest.raises(UsageError, match="need the base weights"):
        load_run(run, "last")
    assert build_network(json.loads((run / "config.json").read_text())) is not None  # untrained: no base needed


def test_a_peft_model_without_a_pretrained_file_keeps_every_weight(tmp_path):
    model = toy(PeftConfig("lora"))
    save_weights(model, tmp_path / "w.safetensors")
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        assert set(f.keys()) == set(model.state_dict())


def test_load_state_takes_every_weight_or_exactly_the_trainable_ones():
    from dgmoe.engine.checkpoint import load_state
    from dgmoe.models.peft import trainable_state_dict

    source, target = toy(PeftConfig("adapter")), toy(PeftConfig("adapter"))
    with torch.no_grad():
        for p in source.parameters():
            p.add_(0.5)
    load_state(target, trainable_state_dict(source))  # soups and leaderboards of PEFT runs
    assert all(torch.equal(a, b) == (n in trainable_names(source)) for (n, a), b in
               zip(source.state_dict().items(), target.state_dict().values()))
    load_state(target, source.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))
    with pytest.raises(RuntimeError, match="Missing key"):
        load_state(target, {k: v for k, v in trainable_state_dict(source).items() if not k.startswith("head.")})


def test_dgmoe_models_shows_trainable_and_total_counts_under_each_mode(cli):
    result = cli("models", "vit_base_patch16_224", "--peft", "all")
    assert result.exit_code == 0, result.output
    legend, header, row = result.output.strip().splitlines()
    assert "trainable/total parameters, in millions" in legend  # the columns say what they count
    assert header.split() == ["model", "params", *MODES]
    cells = row.split()
    assert cells[:2] == ["vit_base_patch16_224", "86.57M"]
    linear, lora = cells[2], cells[3]
    assert linear == "0.769M/86.57M" and lora.startswith("1.064M/86.86M")
    result = cli("models", "resnet50", "--peft", "lora")
    assert result.output.strip().splitlines()[2].split() == ["resnet50", "25.56M", "-"]


def test_dgmoe_models_lists_moas_trainable_count_on_openclip_vit_b16(cli):
    """MoA's adapters, routers and rule on ViT-B/16 (1,485,830: MoA's own count less its never-read phm_rule0,
    tests/parity/test_moa_parity.py) plus the 1000-class head on the 512-d projection (513,000)."""
    result = cli("models", "vit_base_patch16_clip_224", "--peft", "moa")
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[2].split() == ["vit_base_patch16_clip_224", "86.71M", "1.999M/88.19M"]
    model = build_on_meta("vit_base_patch16_clip_224", num_classes=1000, peft={"mode": "moa"})
    assert parameter_counts(model)[1] == 1_485_830 + 513_000
