"""`--head zeroshot`: a zero-shot evaluation is a run folder like any other (`--steps 0`: records, `results`,
`report`), its predictions are CLIP's (exp(logit_scale) x cosine of image and ensembled prompt embeddings); trained,
it is a text-initialised head under every `--peft` mode and on a GMoE tower; bad inputs are one line each."""
from __future__ import annotations

import json
import math

import pytest
import torch
from clip_fixtures import clip_fixture_file
from safetensors.torch import load_file, save_file

from dgmoe.cli import run
from dgmoe.engine.checkpoint import build_network
from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run
from dgmoe.errors import UsageError
from dgmoe.models.clip.templates import OPENAI_IMAGENET, templates
from dgmoe.models.clip.zero_shot import TextHead

MICRO = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_quickgelu_28", "--head", "zeroshot",
         "--progress", "none", "--num-threads", "1"]


def test_a_zero_shot_evaluation_is_a_run_folder_that_results_and_report_read(tmp_path, capsys):
    out = tmp_path / "zs"
    assert run(["train", *MICRO, "--steps", "0", "--output-dir", str(out)]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0] and "loss" not in records[0]
    assert (out / "done").exists() and (out / "model.safetensors").exists()
    assert run(["results", str(out)]) == 0
    assert "head='zeroshot'" in capsys.readouterr().out  # the table names the head: no merge with a linear probe
    assert run(["report", str(out)]) == 0 and (out / "report" / "index.html").exists()
    # the run's weights load back into the network its config.json describes: a TextHead, CLIP's logits
    config = json.loads((out / "config.json").read_text())
    assert "seeded random text tower" in config["model_build"]["text_load"]  # said: no CLIP weights made this head
    network = build_network(config)
    network.load_state_dict(load_file(str(out / "model.safetensors")))
    head = network.get_classifier()
    assert isinstance(head, TextHead) and not bool(head.bias.any())
    scale = head.weight.norm(dim=1)  # every class row: exp(logit_scale) x a unit vector
    torch.testing.assert_close(scale, torch.full_like(scale, 1 / 0.07), atol=1e-4, rtol=0)
    x = torch.randn(3, 3, 28, 28)
    features = network.forward_head(network.forward_features(x), pre_logits=True)
    expected = torch.nn.functional.normalize(features, dim=-1) @ head.weight.T
    torch.testing.assert_close(network(x), expected)
    # a second call finds it done
    assert run(["train", *MICRO, "--steps", "0", "--output-dir", str(out)]) == 0


@pytest.mark.parametrize("peft", ["full", "linear", "lora", "adapter", "adapter_experts"])
def test_a_text_initialised_head_trains_under_every_peft_mode(peft, tmp_path):
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot", peft=peft,
                              prompt_templates="domainbed", steps=2, checkpoint_freq=1, output_dir=str(tmp_path),
                              progress="none")
    setup = prepare_run(cfg)
    head = setup.network.get_classifier()
    assert isinstance(head, TextHead) and head.weight.requires_grad
    norms = head.weight.norm(dim=1)
    torch.testing.assert_close(norms, torch.full_like(norms, 1 / 0.07), atol=1e-4, rtol=0)
    assert run(["train", "--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--head", "zeroshot",
                "--peft", peft, "--prompt-templates", "domainbed", "--steps", "2", "--checkpoint-freq", "1",
                "--progress", "none", "--num-threads", "1", "--output-dir", str(tmp_path / "run")]) == 0
    assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == 2


def test_a_gmoe_clip_tower_takes_a_text_head_from_a_full_clip_file(tmp_path):
    """A GMoE tower (experts copied from the dense FFN) with the recorded open_clip CLIP's image and text towers."""
    path = clip_fixture_file("zero_shot", tmp_path)
    state = torch.load(path, weights_only=True)
    small = state["token_embedding.weight"]  # the recording's 320 ids: CLIP's tokenizer needs all 49,408
    kwargs = {"embed_dim": 32, "depth": 2, "num_heads": 2, "proj_dim": 48, "moe_layers": [1]}
    cfg = RunConfig.from_flat(dataset="Debug28", model="gmoe_base_patch16_clip_quickgelu_224", patch_size=7,
                              model_kwargs=kwargs,
                              pretrained=str(path), head="zeroshot", prompt_templates="domainbed", steps=1,
                              output_dir=str(tmp_path / "run"), progress="none")
    with pytest.raises(UsageError, match="320 token ids but CLIP's tokenizer has 49408"):
        prepare_run(cfg)
    state["token_embedding.weight"] = torch.cat([small, torch.randn(49408 - len(small), small.shape[1])])
    torch.save(state, path)
    setup = prepare_run(cfg)
    head = setup.network.get_classifier()
    scale = state["logit_scale"].exp().item()  # the file's, not CLIP's initial one
    assert not math.isclose(scale, 1 / 0.07, rel_tol=1e-3)
    norms = head.weight.norm(dim=1)
    torch.testing.assert_close(norms, torch.full_like(norms, scale), atol=1e-4, rtol=0)
    assert setup.network.info.is_sparse


def test_templates_from_a_file_and_their_errors(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("# mine\na photo of the {}.\n\nan art of a {}.\n", encoding="utf-8")
    assert templates(str(path)) == ("a photo of the {}.", "an art of a {}.")
    assert len(templates("openai_imagenet")) == 80 == len(OPENAI_IMAGENET)
    path.write_text("a photo of a dog.\n")
    with pytest.raises(UsageError, match=r"t.txt:1: a template needs exactly one \{\}"):
        templates(str(path))
    with pytest.raises(UsageError, match="neither a template set"):
        templates(str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("argv,expected", [
    (["--model", "vit_micro_patch7_28"], "is not a CLIP image tower"),
    (["--model", "vit_micro_patch7_dinov2"], "is not a CLIP image tower"),
    (["--model", "vit_base_patch16_clip_224", "--patch-size", "7"], "needs CLIP's text tower"),
    (["--text-pretrained", "{image_only}"], "has no CLIP text tower"),
    (["--prompt-templates", "nonesuch"], "neither a template set"),
    (["--head", "linear", "--prompt-templates", "domainbed"], "--prompt-templates is read by --head zeroshot only"),
    (["--head", "linear", "--text-pretrained", "{image_only}"], "--text-pretrained is read by --head zeroshot only"),
])
def test_bad_text_head_inputs_are_one_line_and_write_nothing(argv, expected, tmp_path, capsys):
    image_only = tmp_path.parent / "image_only.safetensors"
    save_file({"vision_model.embeddings.class_embedding": torch.zeros(4)}, str(image_only))
    argv = [a.replace("{image_only}", str(image_only)) for a in argv]
    base = list(MICRO)
    if "--model" in argv:
        i = base.index("--model")
        base = base[:i] + base[i + 2:]
    out = tmp_path / "run"
    assert run(["train", *base, *argv, "--steps", "0", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dgmoe: error: ") and expected in err[-1], err
    assert not out.exists()


def test_one_hugging_face_clipmodel_file_gives_both_towers_of_a_zero_shot_run(tmp_path, capsys):
    """The recorded transformers CLIPModel (QuickGELU), its vocabulary widened to CLIP's 49,408 ids."""
    path = clip_fixture_file("hf_clip_model_b16", tmp_path)
    state = load_file(str(path))
    small = state["text_model.embeddings.token_embedding.weight"]
    state["text_model.embeddings.token_embedding.weight"] = torch.cat(
        [small, torch.randn(49408 - len(small), small.shape[1])])
    save_file(state, str(path))
    out = tmp_path / "run"
    kwargs = json.dumps({"embed_dim": 32, "depth": 1, "num_heads": 2, "mlp_ratio": 2.0, "proj_dim": 128})
    assert run(["train", *MICRO[:2], "--model", "vit_base_patch16_clip_quickgelu_224", "--patch-size", "7",
                "--model-kwargs", kwargs, "--pretrained", str(path), *MICRO[4:], "--prompt-templates", "domainbed",
                "--steps", "0", "--output-dir", str(out)]) == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert "read as hf_clip" in config["model_build"]["text_load"] and "2 class names x 1 templates" in \
        config["model_build"]["text_load"]
    network = build_network(config)
    network.load_state_dict(load_file(str(out / "model.safetensors")))
    norms = network.get_classifier().weight.norm(dim=1)
    expected = state["logit_scale"].exp().item()  # CLIPModel's own logit_scale
    torch.testing.assert_close(norms, torch.full_like(norms, expected), atol=1e-4, rtol=0)


@pytest.mark.parametrize("algorithm", ["ERM", "FLYP"])
def test_a_full_clip_file_is_read_once_per_run(algorithm, tmp_path, monkeypatch):
    """The image tower, the zero-shot head and FLYP's trained text tower all come from one read of the file."""
    import dgmoe.models.pretrained as pretrained

    path = clip_fixture_file("zero_shot", tmp_path)  # an open_clip-format state dict, both towers
    state = torch.load(path, weights_only=True)
    small = state["token_embedding.weight"]
    state["token_embedding.weight"] = torch.cat([small, torch.randn(49408 - len(small), small.shape[1])])
    torch.save(state, path)
    reads: list[str] = []
    real = pretrained.read_state_file
    monkeypatch.setattr(pretrained, "read_state_file", lambda p: reads.append(str(p)) or real(p))
    kwargs = {"embed_dim": 32, "depth": 2, "num_heads": 2, "proj_dim": 48}
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_base_patch16_clip_quickgelu_224", patch_size=7,
                              model_kwargs=kwargs, pretrained=str(path), head="zeroshot", algorithm=algorithm,
                              prompt_templates="domainbed", steps=0 if algorithm == "ERM" else 1,
                              output_dir=str(tmp_path / "run"), progress="none")
    setup = prepare_run(cfg)
    assert reads == [str(path.resolve())]
    if algorithm == "FLYP":  # its text tower is the file's, as the head's
        torch.testing.assert_close(setup.algorithm.text_tower.logit_scale.detach(), state["logit_scale"])
    assert run(["train", "--dataset", "Debug28", "--model", "vit_base_patch16_clip_quickgelu_224", "--patch-size", "7",
                "--model-kwargs", json.dumps(kwargs), "--pretrained", str(path), "--head", "zeroshot",
                "--algorithm", algorithm, "--prompt-templates", "domainbed", "--steps", str(cfg.training.steps),
                "--progress", "none", "--num-threads", "1", "--output-dir", str(tmp_path / "run")]) == 0
    assert len(reads) == 2  # the whole run (its own setup) read it once more, once
    # no file cache outlives a build: a text tower from another file reads each file once, as it is now
    other = tmp_path / "text.pt"
    torch.save(state, other)
    prepare_run(cfg.replace(text_pretrained=str(other)))
    assert reads[2:] == [str(path.resolve()), str(other)]
