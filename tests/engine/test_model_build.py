"""The network a run trains, described once (`dgmoe.engine.build.model_build`): a `--peft-rank` walks from the flag
to the LoRA layer through one validation; config.json holds each PEFT setting once; a run folder written before
PEFT had its own section (tests/golden/config_before_peft_section.json, as dgmoe 0.2.0 wrote it) still loads,
resumes and tabulates."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dgmoe.engine.build import RecordedData, model_build, run_build
from dgmoe.engine.config import RunConfig
from dgmoe.models import create_model
from dgmoe.peft.config import PeftConfig

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "config_before_peft_section.json"
TINY = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=16,
            checkpoint_freq=2, num_threads=1, progress="none", peft="lora", peft_rank=4, peft_targets="attn")


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "base.safetensors"
    torch.manual_seed(0)
    dense = create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28)
    save_file({k: v.contiguous() for k, v in dense.state_dict().items()}, str(base))
    return base


def _old_peft(peft: PeftConfig) -> dict:
    """A `PeftConfig` as dgmoe 0.2.0 wrote it (`model_build.kwargs.peft`, `model_info.peft`, weights metadata):
    its targets as the projections, '' for the mode's expert kind."""
    return {"mode": peft.mode, "rank": peft.rank, "alpha": peft.alpha, "dropout": peft.dropout,
            "targets": list(peft.projections), "blocks": list(peft.blocks), "bottleneck": peft.bottleneck,
            "num_experts": peft.num_experts, "top_k": peft.top_k, "router": peft.router, "expert": peft.expert or "",
            "expert_ranks": list(peft.expert_ranks)}


def _old_identity(identity: dict) -> dict:
    """A nested run config in 0.2.0's layout: the PEFT knobs among the model's settings, by their flags' names."""
    peft = identity.pop("peft")
    flat = {k: v for k, v in RunConfig(peft=PeftConfig.from_dict(peft)).flat().items() if k.startswith("peft")}
    return {**identity, "model": {**identity["model"], **flat}}


def _as_written_before(run: Path) -> None:
    """Rewrite a run folder written today as dgmoe 0.2.0 wrote it: config.json (PEFT in the model section, in
    `model_build.kwargs` and in `model_info`), the weights' metadata (PEFT once more) and the resume state's
    identity."""
    config = json.loads((run / "config.json").read_text())
    old = _old_peft(PeftConfig.from_dict(config["config"]["peft"]))
    config["config"] = _old_identity(config["config"])
    for later in ("compile_mode", "wandb", "wandb_project", "wandb_entity", "wandb_name", "mlflow", "mlflow_uri",
                  "mlflow_experiment"):  # later settings 0.2.0 did not write (each at its default when absent)
        config["config"]["execution"].pop(later)
    config["model_build"]["kwargs"]["peft"] = old
    config["model_info"]["peft"] = old
    (run / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    for weights in run.glob("*.safetensors"):
        with safe_open(str(weights), "pt") as f:
            meta = f.metadata()
        save_file(load_file(str(weights)), str(weights), metadata={**meta, "peft": json.dumps(old, sort_keys=True)})
    state = torch.load(run / "resume.pt", weights_only=True)
    state["identity"] = _old_identity(state["identity"])
    torch.save(state, run / "resume.pt")


def _placeholders(value: object, run: Path, base: Path) -> object:
    return json.loads(json.dumps(value).replace(str(run), "<run>").replace(str(base), "<base>"))


def test_a_run_folder_written_before_peft_had_its_section_loads_resumes_and_tabulates(tmp_path, cli):
    from dgmoe.engine import train
    from dgmoe.engine.checkpoint import load_run

    base, run = _base(tmp_path), tmp_path / "runs" / "old"
    train(steps=4, keep_resume=True, pretrained=str(base), output_dir=str(run), **TINY)
    written = json.loads((run / "config.json").read_text())
    assert written["config"]["peft"]["rank"] == 4 and "peft" not in written["model_build"]["kwargs"]
    assert "peft" not in written["model_info"] and not any(k.startswith("peft") for k in written["config"]["model"])
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        assert "peft" not in f.metadata() and f.metadata()["base_pretrained"] == str(base)

    _as_written_before(run)  # ... and this is what dgmoe 0.2.0 wrote, to the letter:
    old = json.loads((run / "config.json").read_text())
    golden = {k: v for k, v in json.loads(GOLDEN.read_text()).items() if k != "what"}
    assert _placeholders({k: old[k] for k in golden}, run, base) == golden

    network, _ = load_run(run, "last")  # rebuilt through model_build: the network 0.2.0 recorded
    build = run_build(old)
    recorded = old["model_build"]["kwargs"]
    assert build.kwargs == {k: v for k, v in recorded.items() if k not in ("peft", "pretrained",
                                                                            "pretrained_antialias")}
    assert build.peft == PeftConfig.from_dict(recorded["peft"]) == PeftConfig(mode="lora", rank=4, targets="attn")
    assert network.blocks[0].attn.proj.lora_A.shape[0] == 4

    result = cli("results", tmp_path / "runs")
    assert result.exit_code == 0 and "peft_rank=4" in result.output, result.output

    longer = train(steps=6, extend=True, pretrained=str(base), output_dir=str(run), **TINY)  # from its resume.pt
    scratch = train(steps=6, pretrained=str(base), output_dir=str(tmp_path / "scratch"), **TINY)
    assert longer.records[-1]["step"] == scratch.records[-1]["step"] == 5
    keep = ("loss", "env0_out_acc", "env1_in_acc", "env2_out_acc")
    assert {k: longer.records[-1][k] for k in keep} == {k: scratch.records[-1][k] for k in keep}
    assert list(longer.records[-1]["args"]) == list(scratch.records[-1]["args"])  # the records' args: same keys


def test_peft_rank_walks_from_the_flag_to_the_lora_layer_through_one_validation(monkeypatch):
    """`--peft-rank 4`: click turns the text into an int, the run config's `peft` section holds it (validated
    once, by `dgmoe.settings.validate`), and that same `PeftConfig` reaches the LoRA layers: no dict, no JSON,
    no second config on the way."""
    import click

    import dgmoe.settings as settings
    from dgmoe.cli.options import config_from_options
    from dgmoe.cli.train import command as train_command
    from dgmoe.engine.setup import prepare_run
    from dgmoe.models.peft import LoRALinear

    seen = {"parsed": 0, "validated": 0, "dicts": 0}
    convert, validate, to_dict = click.types.IntParamType.convert, settings.validate, PeftConfig.to_dict

    def counted_convert(self, value, param, ctx):
        seen["parsed"] += value == "4"
        return convert(self, value, param, ctx)

    def counted_validate(config):
        if isinstance(config, PeftConfig) and config.rank == 4:
            seen["validated"] += 1
        return validate(config)

    def counted_to_dict(self):
        seen["dicts"] += 1
        return to_dict(self)

    monkeypatch.setattr(click.types.IntParamType, "convert", counted_convert)
    monkeypatch.setattr(settings, "validate", counted_validate)
    monkeypatch.setattr(PeftConfig, "to_dict", counted_to_dict)
    argv = ["--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28", "--model-kwargs", '{"depth": 2}',
            "--n-per-domain", "16", "--peft", "lora", "--peft-rank", "4", "--peft-targets", "attn"]
    ctx = train_command.make_context("train", argv)
    cfg = config_from_options(ctx, ctx.params)
    setup = prepare_run(cfg)
    layers = [m for m in setup.network.modules() if isinstance(m, LoRALinear)]
    assert len(layers) == 4 and {m.lora_A.shape[0] for m in layers} == {4}  # qkv and proj of 2 blocks, r = 4
    assert setup.network.info.peft is cfg.peft and setup.build.peft is cfg.peft  # one config, passed along
    conversions = seen["parsed"] + seen["validated"] + seen["dicts"] + 1  # + the LoRA layers taking it
    assert seen == {"parsed": 1, "validated": 1, "dicts": 0} and conversions <= 3


def test_model_build_is_the_runs_network_without_none_and_its_peft_once():
    cfg = RunConfig.from_flat(model="gmoe_micro_patch7_28", patch_size=None,
                              model_kwargs={"depth": 2, "moe_layers": [1]}, peft="adapter_experts", peft_experts=3,
                              peft_top_k=2)
    build = model_build(cfg, RecordedData(num_classes=7, input_shape=(1, 28, 28)))
    assert build.kwargs == {"num_classes": 7, "img_size": 28, "in_chans": 1, "depth": 2, "moe_layers": [1]}
    assert build.peft is cfg.peft and "peft" not in build.record()["kwargs"]
    assert model_build(cfg.replace(peft="full")).peft is None  # every weight trains: no PEFT applied
    assert build.describe().routes_tokens and build.describe().peft is cfg.peft


def test_a_model_carries_what_its_build_did_in_one_attribute(tmp_path):
    base = _base(tmp_path)
    model = create_model("vit_micro_patch7_28", depth=1, in_chans=1, img_size=28, num_classes=3,
                         pretrained=str(base), peft={"mode": "lora"})
    info = model.info
    assert info.peft == PeftConfig(mode="lora") and info.base_weights["base_pretrained"] == str(base)
    assert info.load_report.reinitialized and not any(hasattr(model, a) for a in ("peft", "peft_base", "load_report"))
    assert not {"peft", "base_weights", "load_report", "text_load"} & set(info.to_dict())


def test_old_run_configs_put_the_peft_knobs_in_their_section_and_keep_job_ids():
    old = json.loads(GOLDEN.read_text())["config"]
    cfg = RunConfig.from_dict(old)
    assert cfg.peft == PeftConfig(mode="lora", rank=4, targets="attn")
    assert cfg.flat()["peft_targets"] == "attn" and list(cfg.flat()).index("peft") == \
        list(cfg.flat()).index("pretrained_antialias") + 1  # the flags' order as before
    # a sweep's job id hashes the identity as before PEFT had its own section (md5 of the changed settings; the
    # id dgmoe 0.2.0 gives this run)

    changed = {"data": {"n_per_domain": 16}, "model": {"name": "vit_micro_patch7_28", "kwargs": {"depth": 1},
                                                       "peft": "lora", "peft_rank": 4, "peft_targets": "attn",
                                                       "pretrained": "<base>"},
               "training": {"checkpoint_freq": 2, "steps": 4}}
    assert cfg.identity_hash() == hashlib.md5(json.dumps(changed, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("bad, message", [({"top_k": 7}, "top_k must be in [1, num_experts=6], got 7"),
                                          ({"num_experts": 0}, "num_experts must be >= 1, got 0"),
                                          ({"routing": "image", "capacity_factor": 1.5}, "image routing is dropless")])
def test_a_models_moe_keywords_are_refused_naming_the_keyword(cli, tmp_path, bad, message):
    result = cli("train", "--dataset", "RotatedMNIST", "--model", "gmoe_micro_patch7_28", "--n-per-domain", "8",
                 "--model-kwargs", json.dumps({"depth": 2, "moe_layers": [1], **bad}), "--output-dir", tmp_path / "run")
    assert result.exit_code == 2 and "--model gmoe_micro_patch7_28 cannot be built with" in result.output
    assert message in result.output and not (tmp_path / "run").exists()
