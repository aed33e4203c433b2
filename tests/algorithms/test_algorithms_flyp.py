"""FLYP (Goyal et al., CVPR 2023) on a micro CLIP tower: both towers train with the contrastive loss against
class-name captions while the head does not; evaluation rewrites the head as the current text tower's zero-shot
classifier; a run needs --head zeroshot; it trains and resumes as a run."""
import pytest
import torch

from dgmoe.cli import run
from dgmoe.data.base import Batch
from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run
from dgmoe.models.clip.zero_shot import class_embeddings

ARGS = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--algorithm", "FLYP", "--progress",
        "none", "--num-threads", "1", "--checkpoint-freq", "1", "--hparams", '{"batch_size": 4}']


def _batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(4, 3, 28, 28, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(2)]


def test_both_towers_train_and_evaluation_uses_the_text_tower_s_classifier(tmp_path):
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot", algorithm="FLYP",
                              prompt_templates="domainbed", steps=2, output_dir=str(tmp_path), progress="none",
                              hparams={"lr": 1e-3})
    alg = prepare_run(cfg).algorithm
    head = alg.network.get_classifier()
    text0 = [p.detach().clone() for p in alg.text_tower.parameters()]
    image0 = [p.detach().clone() for p in alg.network.parameters()]
    head0 = head.weight.detach().clone()
    alg.train()
    for step in range(2):
        alg.update(_batches(step), step)
    assert any(not torch.equal(a, b) for a, b in zip(text0, alg.text_tower.parameters()))  # the text tower moved
    assert any(not torch.equal(a, b) for a, b in zip(image0, alg.network.parameters()))  # the image tower moved
    assert torch.equal(head.weight, head0)  # the head is not trained
    alg.eval()
    expected = alg.text_tower.logit_scale.exp() * class_embeddings(alg.text_tower, ["0", "1"], ["a photo of a {}."])
    torch.testing.assert_close(head.weight, expected)


def test_a_linear_head_is_refused_in_one_line(tmp_path, capsys):
    code = run(["train", *ARGS, "--steps", "1", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "FLYP needs" in err and "--head zeroshot" in err, err


def test_flyp_trains_and_resumes_as_a_run(tmp_path):
    from dgmoe.engine.io import read_jsonl

    argv = ["train", *ARGS, "--head", "zeroshot", "--prompt-templates", "domainbed", "--keep-resume"]
    assert run([*argv, "--steps", "3", "--output-dir", str(tmp_path / "whole")]) == 0
    assert run([*argv, "--steps", "2", "--output-dir", str(tmp_path / "half")]) == 0
    assert run(["train", "--config", str(tmp_path / "half" / "config.json"), "--steps", "3", "--extend"]) == 0
    whole, half = read_jsonl(tmp_path / "whole" / "results.jsonl"), read_jsonl(tmp_path / "half" / "results.jsonl")
    assert [r["step"] for r in half] == [r["step"] for r in whole]
    for key in ("env0_in_acc", "env1_out_loss", "loss"):
        assert half[-1][key] == pytest.approx(whole[-1][key], abs=1e-6), key
