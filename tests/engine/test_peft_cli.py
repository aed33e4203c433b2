"""End to end on CPU: a tiny CLIP-shaped tower (pre-norm, QuickGELU, projection) and a tiny DINOv2-shaped one
(LayerScale, registers) with adapter experts on a frozen pretrained base train through `dgmoe train` (a
checkpoint of its trainable weights naming the base), `dgmoe results` and `dgmoe analyze routing` (expert usage
per domain for the adapter experts)."""
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dgmoe.models import create_model

TOWERS = ("vit_micro_patch7_clip_quickgelu_28", "vit_micro_patch7_reg4_dinov2")  # test-sized stand-ins
TRAIN = ["train", "--dataset", "RotatedMNIST", "--model-kwargs", '{"depth": 2}', "--steps", "3", "--checkpoint-freq",
         "2", "--n-per-domain", "16", "--progress", "none", "--num-threads", "1"]
PEFT = ["--peft", "adapter_experts", "--peft-experts", "3", "--peft-top-k", "2", "--peft-bottleneck", "8"]


@pytest.mark.parametrize("tower", TOWERS)
def test_adapter_experts_train_report_and_analyse_routing(cli, tmp_path, tower):
    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model(tower, depth=2, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    run = tmp_path / "runs" / "moa"
    result = cli(*TRAIN, "--model", tower, *PEFT, "--pretrained", base, "--output-dir", run)
    assert result.exit_code == 0, result.output
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["peft"]["mode"] == "adapter_experts" and config["config"]["peft"]["num_experts"] == 3
    assert "moe_aux_weight" in config["hparams"]
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert keys and all(k.startswith("head.") or ".mlp.adapter." in k for k in keys), sorted(keys)
    assert meta["base_pretrained"] == str(base) and meta["base_model"] == tower
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert records and all(r["loss"] == r["loss"] for r in records)  # finite, not NaN

    result = cli("results", tmp_path / "runs")
    assert result.exit_code == 0 and "ERM" in result.output, result.output

    out = tmp_path / "routing"
    result = cli("analyze", "routing", run, "--out", out, "--n-images", "4", "--show", "1")
    assert result.exit_code == 0, result.output
    usage = (out / "expert_usage.csv").read_text()
    assert "blocks.1.mlp.adapter" in usage and "blocks.0.mlp.adapter" in usage
    assert (out / "expert_usage.md").is_file() and list(out.glob("routing_*adapter*.png"))


def test_bad_peft_settings_are_refused_in_one_line_before_anything_is_written(cli, tmp_path):
    run = tmp_path / "run"
    result = cli(*TRAIN, "--model", TOWERS[0], "--peft", "adapter_experts", "--peft-experts", "2", "--peft-top-k", "3",
                 "--output-dir", run)
    assert result.exit_code == 2 and "--peft-top-k must be in [1, --peft-experts=2]" in result.output
    result = cli(*TRAIN, "--model", TOWERS[0], "--peft", "lora", "--peft-blocks", "7", "--output-dir", run)
    assert result.exit_code == 2 and "--peft-blocks 7 is out of range" in result.output
    assert not run.exists() or not any(run.iterdir())


def test_a_peft_resume_state_leaves_the_base_out_and_continues_exactly(tmp_path):
    from dgmoe.engine import train
    from dgmoe.engine.checkpoint import load_resume_state

    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    tiny = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=16,
                checkpoint_freq=2, num_threads=1, progress="none", pretrained=str(base), peft="lora",
                algorithm="SWAD", hparams={"swad_n_converge": 1, "swad_n_tolerance": 1})
    short = train(steps=4, keep_resume=True, output_dir=str(tmp_path / "run"), **tiny)
    state = load_resume_state(tmp_path / "run" / "resume.pt")
    weights = state["algorithm"]
    assert "network.head.weight" in weights and "network.blocks.0.attn.qkv.lora_B" in weights
    assert "network_swad.head.weight" in weights and "network_swad.blocks.0.attn.qkv.lora_A" in weights
    assert not any(k.endswith(("qkv.weight", "fc1.weight", "pos_embed")) for k in weights), sorted(weights)
    assert state["peft_bases"][0]["base_pretrained"] == str(base)
    longer = train(steps=6, extend=True, output_dir=str(tmp_path / "run"), **tiny)
    scratch = train(steps=6, output_dir=str(tmp_path / "scratch"), **tiny)
    assert short.records and longer.records[-1]["step"] == scratch.records[-1]["step"] == 5
    keep = ("env0_out_acc", "env1_in_acc", "env2_out_acc")
    assert {k: longer.records[-1][k] for k in keep} == {k: scratch.records[-1][k] for k in keep}


def test_moa_trains_from_the_cli_keeps_only_its_trainable_weights_and_resumes_exactly(cli, tmp_path):
    """`dgmoe train --peft moa`: MoA's KAdaptation experts on every second block's qkv; a checkpoint of the
    head, the experts, their routers and the shared PHM rule; 4 steps then extended to 6 equal 6 from scratch."""
    tower = "vit_micro_patch7_clip_28"
    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model(tower, depth=3, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    args = [*TRAIN, "--model", tower, "--model-kwargs", '{"depth": 3}', "--peft", "moa", "--pretrained", base]
    run, scratch = tmp_path / "run", tmp_path / "scratch"
    result = cli(*args, "--steps", "4", "--keep-resume", "--output-dir", run)
    assert result.exit_code == 0, result.output
    config = json.loads((run / "config.json").read_text())
    hparams = config["hparams"]  # MoA's registry (as DomainBed's) for small images: lr 1e-3, weight decay 0
    assert config["config"]["peft"]["mode"] == "moa" and hparams["moe_aux_weight"] == 0.01
    assert (hparams["lr"], hparams["weight_decay"]) == (1e-3, 0.0)
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert {k.split(".adapter.")[0] for k in keys if ".adapter." in k} == {"blocks.0.attn.qkv", "blocks.2.attn.qkv"}
    assert {"adapter.rule_left", "adapter.rule_right", "head.weight"} <= keys
    assert all(k.startswith(("head.", "adapter.")) or ".attn.qkv.adapter." in k for k in keys), sorted(keys)
    assert cli(*args, "--steps", "6", "--extend", "--output-dir", run).exit_code == 0
    assert cli(*args, "--steps", "6", "--output-dir", scratch).exit_code == 0
    last = [json.loads((d / "results.jsonl").read_text().splitlines()[-1]) for d in (run, scratch)]
    assert last[0]["step"] == last[1]["step"] == 5
    keep = ("loss", "env0_out_acc", "env1_in_acc", "env2_out_acc")
    assert {k: last[0][k] for k in keep} == {k: last[1][k] for k in keep}
