"""LoRA that travels: peft adapters recorded with peft's own code (tests/parity/record_formats.py: a timm ViT and
open_clip's image tower, random adapter weights) imported into dgmoe give peft's outputs; dgmoe's export writes
peft's files (key names, config); `merge_lora` folds the update into the base weights; `dgmoe export peft`
writes a run's LoRA. The live check with peft itself runs where peft is installed."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import dgmoe
from dgmoe.errors import UsageError
from dgmoe.models.peft import LoRALinear
from dgmoe.models.peft_interop import import_peft_adapter, lora_layers, merge_lora, peft_adapter

FIXTURES = Path(__file__).resolve().parents[1] / "parity" / "fixtures"
CASES = {c["case"]: c for c in json.loads((FIXTURES / "formats.json").read_text())["cases"]}


@pytest.fixture(scope="module")
def io():
    return load_file(str(FIXTURES / "formats_io.safetensors"))


def _base(name: str, **kwargs) -> torch.nn.Module:
    case = CASES[name]
    folder = FIXTURES / case["folder"]
    return dgmoe.create_model(case["model"], pretrained=str(folder / "base.safetensors"),
                              **{**case["overrides"], **kwargs}).eval()


def _adapter(name: str) -> Path:
    return FIXTURES / CASES[name]["folder"] / "adapter"


@pytest.mark.parametrize("name", ["peft_lora", "peft_lora_open_clip"])
def test_a_peft_adapter_imported_computes_peft_output(name, io):
    model = _base(name)
    config = import_peft_adapter(model, _adapter(name))
    model.eval()
    if name == "peft_lora":
        assert (config.rank, config.alpha, config.targets, config.blocks) == (4, 8.0, "qkv,fc1", ())
    else:  # open_clip's c_fc / c_proj are timm's fc1 / fc2
        assert (config.rank, config.alpha, config.targets) == (2, 6.0, "mlp")
    with torch.no_grad():
        out = model(io[f"{name}.x"])
        plain = _base(name)(io[f"{name}.x"])
    torch.testing.assert_close(out, io[f"{name}.out"], rtol=1e-5, atol=1e-5)
    assert (plain - io[f"{name}.out"]).abs().max() > 1e-3  # the adapter matters: the check can fail


def test_an_adapter_on_a_whole_open_clip_model_imports_its_image_tower(io, tmp_path):
    """peft on a whole open_clip CLIP names the image tower's modules `visual.*`; the text tower's LoRA (here
    on its own c_fc) is not the image tower's and is left out."""
    source = _adapter("peft_lora_open_clip")
    tensors = {k.replace("base_model.model.", "base_model.model.visual."): v
               for k, v in load_file(str(source / "adapter_model.safetensors")).items()}
    text = {k.replace("visual.", ""): torch.ones_like(v) for k, v in tensors.items() if "resblocks.0.mlp.c_fc" in k}
    save_file({**tensors, **text}, str(tmp_path / "adapter_model.safetensors"))
    shutil.copy(source / "adapter_config.json", tmp_path / "adapter_config.json")
    model = _base("peft_lora_open_clip")
    import_peft_adapter(model, tmp_path)
    with torch.no_grad():
        out = model.eval()(io["peft_lora_open_clip.x"])
    torch.testing.assert_close(out, io["peft_lora_open_clip.out"], rtol=1e-5, atol=1e-5)


def test_merged_weights_give_the_unmerged_outputs(io):
    model = _base("peft_lora")
    import_peft_adapter(model, _adapter("peft_lora"))
    model.eval()
    x = io["peft_lora.x"]
    with torch.no_grad():
        unmerged = model(x)
        merged = merge_lora(model)(x)
    assert not lora_layers(model) and type(model.blocks[0].attn.qkv) is torch.nn.Linear
    assert model.info.peft is None and not any(k.endswith(("lora_A", "lora_B")) for k in model.state_dict())
    torch.testing.assert_close(merged, unmerged, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(merged, io["peft_lora.merged"], rtol=1e-5, atol=1e-5)  # peft's merge_and_unload


def test_the_export_writes_peft_own_keys_and_config():
    """Imported then exported, the adapter is peft's file again: the same keys and tensors, and the config
    fields peft reads to rebuild it."""
    model = _base("peft_lora")
    import_peft_adapter(model, _adapter("peft_lora"))
    config, tensors = peft_adapter(model, base_model="vit_tiny_patch16_224")
    theirs = load_file(str(_adapter("peft_lora") / "adapter_model.safetensors"))
    assert set(tensors) == set(theirs)
    for key, value in theirs.items():
        torch.testing.assert_close(tensors[key], value, rtol=0, atol=0)
    peft_config = json.loads((_adapter("peft_lora") / "adapter_config.json").read_text())
    fields = ("peft_type", "r", "lora_alpha", "lora_dropout", "modules_to_save", "bias", "fan_in_fan_out", "use_rslora",
              "use_dora", "init_lora_weights", "layers_to_transform", "rank_pattern", "alpha_pattern")
    assert {k: config[k] for k in fields} == {k: peft_config[k] for k in fields}
    assert sorted(config["target_modules"]) == sorted(peft_config["target_modules"])


def test_a_subset_of_blocks_exports_full_module_names_and_imports_back(tmp_path):
    torch.manual_seed(0)
    lora = dict(mode="lora", rank=2, blocks=[1], targets=["qkv", "fc2"])
    model = dgmoe.create_model("vit_micro_patch7_28", depth=3, num_classes=4, peft=lora).eval()
    for layer in lora_layers(model).values():
        torch.nn.init.normal_(layer.lora_B)
    base = {k: v for k, v in model.state_dict().items() if "lora_" not in k}
    config, tensors = peft_adapter(model)
    assert sorted(config["target_modules"]) == ["blocks.1.attn.qkv", "blocks.1.mlp.fc2"]
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
    fresh = dgmoe.create_model("vit_micro_patch7_28", depth=3, num_classes=4).eval()
    fresh.load_state_dict(base)
    imported = import_peft_adapter(fresh, tmp_path)
    assert (imported.blocks, imported.projections, imported.rank) == ((1,), ("qkv", "fc2"), 2)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), model(x), rtol=1e-5, atol=1e-5)


def _edited(tmp_path: Path, config: dict | None = None, rename: tuple[str, str] | None = None) -> Path:
    folder = tmp_path / "adapter"
    shutil.copytree(_adapter("peft_lora"), folder)
    if config:
        path = folder / "adapter_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if rename:
        tensors = load_file(str(folder / "adapter_model.safetensors"))
        save_file({k.replace(*rename): v for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
    return folder


@pytest.mark.parametrize("config, rename, message", [
    ({"use_dora": True}, None, "use_dora=True (DoRA's magnitude vectors) has no place in dgmoe's LoRA"),
    ({"peft_type": "IA3"}, None, "peft_type must be LORA, got 'IA3'"),
    ({"rank_pattern": {"qkv": 8}}, None, "per-module ranks"),
    (None, ("blocks.0.attn.qkv", "patch_embed.proj"), "patch_embed.proj is not a LoRA pair on a block's projection"),
    (None, ("blocks.1.mlp.fc1", "blocks.1.mlp.fc2"), "is not the same targets (qkv, fc1, fc2) in each of blocks"),
    (None, ("attn.qkv", "attn.out_proj"), "nn.MultiheadAttention"),
])
def test_an_adapter_dgmoe_cannot_hold_is_refused_in_one_line(tmp_path, config, rename, message):
    folder = _edited(tmp_path, config, rename)
    with pytest.raises(UsageError) as err:
        import_peft_adapter(_base("peft_lora"), folder)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_import_refuses_a_peft_model_and_a_folder_without_an_adapter(tmp_path):
    with pytest.raises(UsageError, match="adapter_config.json missing"):
        import_peft_adapter(_base("peft_lora"), tmp_path)
    with pytest.raises(UsageError, match="built without --peft"):
        import_peft_adapter(_base("peft_lora", peft="lora"), _adapter("peft_lora"))
    with pytest.raises(UsageError, match="holds LoRA weights"):
        peft_adapter(_base("peft_lora", peft="adapter"))


def test_dgmoe_export_peft_writes_a_runs_lora_that_imports_to_its_outputs(cli, tmp_path):
    from dgmoe.engine import train
    from dgmoe.engine.checkpoint import load_run

    torch.manual_seed(0)
    base = tmp_path / "base.safetensors"
    dense = dgmoe.create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    run = tmp_path / "run"
    train(steps=2, output_dir=str(run), dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1},
          n_per_domain=16, checkpoint_freq=2, num_threads=1, progress="none", pretrained=str(base), peft="lora",
          hparams={"lr": 0.05})
    out = tmp_path / "adapter"
    result = cli("export", "peft", run, "--out", out)
    assert result.exit_code == 0 and "wrote the peft adapter" in result.output, result.output
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["target_modules"] == ["qkv"]
    assert config["base_model_name_or_path"] == "vit_micro_patch7_28" and config["modules_to_save"] == ["head"]
    network, _ = load_run(run)
    model = dgmoe.create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28, num_classes=10,
                               pretrained=str(base)).eval()
    import_peft_adapter(model, out)
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(model(x), network(x), rtol=1e-5, atol=1e-5)
    again = cli("export", "peft", run, "--out", out)
    assert again.exit_code == 2 and "already holds" in again.output and "\n" not in again.output.strip()
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = cli("export", "peft", run, "--out", afile)
    assert result.exit_code == 2 and "is a file" in result.output and afile.read_text() == "x"


def test_dgmoe_export_peft_refuses_a_run_without_lora(cli, tmp_path):
    from dgmoe.engine import train

    run = tmp_path / "run"
    train(steps=1, output_dir=str(run), dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1},
          n_per_domain=8, num_threads=1, progress="none")
    result = cli("export", "peft", run, "--out", tmp_path / "adapter")
    assert result.exit_code == 2 and "holds LoRA weights (--peft lora); this model has" in result.output, result.output
    assert not (tmp_path / "adapter").exists()


def test_peft_itself_loads_the_export_onto_the_same_architecture(io, tmp_path):
    """Live, where peft is installed (PYTHONPATH=/path/to/peers): peft's PeftModel.from_pretrained on the dgmoe
    (timm-named) model with the base weights computes dgmoe's LoRA model's outputs."""
    peft = pytest.importorskip("peft")
    model = _base("peft_lora")
    import_peft_adapter(model, _adapter("peft_lora"))
    config, tensors = peft_adapter(model)
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
    loaded = peft.PeftModel.from_pretrained(_base("peft_lora"), str(tmp_path)).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(io["peft_lora.x"]), model.eval()(io["peft_lora.x"]), rtol=1e-5, atol=1e-5)
    assert any(isinstance(m, LoRALinear) for m in model.modules())
