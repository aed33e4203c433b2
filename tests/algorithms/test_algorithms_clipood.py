"""CLIPood (Shu et al., ICML 2023) on a micro CLIP tower with a text head: the margin metric softmax is Eq. 4, the
text head stays frozen while the image tower trains, the evaluated weights are the Beta-weighted mean of every
step's weights, a run needs --head zeroshot (one-line error otherwise), and it trains, resumes and evaluates as
a run."""
import pytest
import torch
import torch.nn.functional as F

from dgmoe.algorithms.clipood import beta_weight, margin_logits
from dgmoe.cli import run
from dgmoe.data.base import Batch
from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run

MICRO = ["--dataset", "Debug28", "--model", "vit_micro_patch7_clip_28", "--algorithm", "CLIPood", "--progress",
         "none", "--num-threads", "1", "--checkpoint-freq", "1", "--hparams", '{"batch_size": 4, "clipood_steps": 3}']


def _setup(tmp_path, **kw):
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot",
                              algorithm="CLIPood", prompt_templates="domainbed", steps=3, output_dir=str(tmp_path),
                              progress="none", hparams={"clipood_steps": 3, "lr": 1e-3}, **kw)
    return prepare_run(cfg)


def test_margin_logits_are_eq_4():
    g = torch.Generator().manual_seed(0)
    f, text, y = torch.randn(4, 8, generator=g), F.normalize(torch.randn(3, 8, generator=g), dim=-1), torch.tensor(
        [0, 2, 1, 2])
    got = margin_logits(f, text, y, 14.0, 0.3)
    for i in range(4):
        for c in range(3):
            expected = 14.0 * (F.normalize(f[i], dim=0) @ text[c] - 0.3 * text[y[i]] @ text[c])
            torch.testing.assert_close(got[i, c], expected)


def _batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(4, 3, 28, 28, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(2)]


def test_text_head_frozen_image_tower_trained_and_the_average_is_beta_weighted(tmp_path):
    setup = _setup(tmp_path)
    alg = setup.algorithm
    head = alg.network.get_classifier()
    assert not head.weight.requires_grad
    text = F.normalize(head.weight, dim=-1)
    torch.testing.assert_close(alg.text, text)
    params = [[p.detach().clone() for p in alg.network.parameters()]]
    alg.train()
    assert not alg.network.training  # CLIPood's frozen normalisation: the network runs in eval mode
    for step in range(3):
        alg.update(_batches(step), step)
        params.append([p.detach().clone() for p in alg.network.parameters()])
    assert torch.equal(alg.network.get_classifier().weight, head.weight)  # the text embeddings stayed
    assert not torch.equal(params[0][0], params[-1][0])  # the image tower moved
    weights = torch.tensor([beta_weight(i, 3, 0.5) for i in range(4)], dtype=torch.float64)
    for k, avg in enumerate(alg.network_bma.parameters()):
        expected = sum(w * p[k].double() for w, p in zip(weights, params)) / weights.sum()
        torch.testing.assert_close(avg.double(), expected, rtol=0, atol=1e-5)


def test_a_linear_head_is_refused_in_one_line(tmp_path, capsys):
    code = run(["train", *MICRO, "--steps", "1", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "CLIPood needs" in err and "--head zeroshot" in err, err


def test_clipood_trains_and_resumes_as_a_run(tmp_path):
    from dgmoe.engine.io import read_jsonl

    argv = ["train", *MICRO, "--head", "zeroshot", "--prompt-templates", "domainbed", "--keep-resume"]
    assert run([*argv, "--steps", "3", "--output-dir", str(tmp_path / "whole")]) == 0
    assert run([*argv, "--steps", "2", "--output-dir", str(tmp_path / "half")]) == 0
    assert run(["train", "--config", str(tmp_path / "half" / "config.json"), "--steps", "3", "--extend"]) == 0
    whole, half = read_jsonl(tmp_path / "whole" / "results.jsonl"), read_jsonl(tmp_path / "half" / "results.jsonl")
    assert [r["step"] for r in half] == [r["step"] for r in whole]
    for key in ("env0_in_acc", "env1_out_loss", "loss"):
        assert half[-1][key] == pytest.approx(whole[-1][key], abs=1e-6), key
