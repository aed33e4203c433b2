"""End to end on CPU: a toy ViT with adapter experts on a frozen pretrained base trains through `dgmoe train`
(a checkpoint of its trainable weights naming the base), `dgmoe results` and `dgmoe analyze routing`
(expert usage per domain for the adapter experts)."""
import json

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dgmoe.models import create_model

TRAIN = ["train", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 2}',
         "--steps", "3", "--checkpoint-freq", "2", "--n-per-domain", "16", "--progress", "none", "--num-threads", "1"]
PEFT = ["--peft", "adapter_experts", "--peft-experts", "3", "--peft-top-k", "2", "--peft-bottleneck", "8"]


def test_adapter_experts_train_report_and_analyse_routing(cli, tmp_path):
    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model("vit_micro_patch7_28", depth=2, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    run = tmp_path / "runs" / "moa"
    result = cli(*TRAIN, *PEFT, "--pretrained", base, "--output-dir", run)
    assert result.exit_code == 0, result.output
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["model"]["peft"] == "adapter_experts"
    assert config["model_info"]["peft"]["num_experts"] == 3 and "moe_aux_weight" in config["hparams"]
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    assert keys and all(k.startswith("head.") or ".mlp.adapter." in k for k in keys), sorted(keys)
    assert meta["base_pretrained"] == str(base) and meta["base_model"] == "vit_micro_patch7_28"
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
    result = cli(*TRAIN, "--peft", "adapter_experts", "--peft-experts", "2", "--peft-top-k", "3", "--output-dir", run)
    assert result.exit_code == 2 and "--peft-top-k must be in [1, --peft-experts=2]" in result.output
    result = cli(*TRAIN, "--peft", "lora", "--peft-blocks", "7", "--output-dir", run)
    assert result.exit_code == 2 and "--peft-blocks 7 is out of range" in result.output
    assert not run.exists() or not any(run.iterdir())
