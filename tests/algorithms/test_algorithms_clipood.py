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
         "none", "--num-threads", "1", "--checkpoint-freq", "1", "--hparams", '{"batch_size": 4}']


def _setup(tmp_path, **kw):
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot",
                              algorithm="CLIPood", prompt_templates="domainbed", output_dir=str(tmp_path),
                              progress="none", hparams={"lr": 1e-3}, **{"steps": 3, **kw})
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


def test_the_beta_weights_span_the_run_s_steps(tmp_path):
    """T of Eq. 6 is the run's step count, --steps or the catalogue's, with no setting of its own."""
    assert "clipood_steps" not in _setup(tmp_path).hparams
    assert _setup(tmp_path, steps=7).algorithm.total_steps == 7
    cfg = RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot", algorithm="CLIPood",
                              output_dir=str(tmp_path), progress="none")
    setup = prepare_run(cfg)
    assert setup.algorithm.total_steps == setup.n_steps == 5001  # Debug28's catalogue schedule
    assert float(setup.algorithm.bma_weight_sum) == beta_weight(0, 5001, 0.5)


def test_clipood_killed_and_resumed_equals_the_uninterrupted_run_and_refuses_extend(tmp_path, capsys):
    from run_records import comparable_records

    from dgmoe.engine.sinks import Sink
    from dgmoe.engine.trainer import train

    class Killed(BaseException):
        pass

    class KillAfter(Sink):
        def step(self, step, metrics, train_seconds):
            if step == 3:  # trained, not saved: the resumed run redoes it from step 2's state
                raise Killed

    def cfg(out):
        return RunConfig.from_flat(dataset="Debug28", model="vit_micro_patch7_clip_28", head="zeroshot",
                                   algorithm="CLIPood", prompt_templates="domainbed", steps=6, checkpoint_freq=2,
                                   hparams={"batch_size": 4, "lr": 1e-3}, num_threads=1, keep_resume=True,
                                   progress="none", output_dir=str(out))

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    train(cfg(whole))
    with pytest.raises(Killed):
        train(cfg(killed), sinks=[KillAfter()])
    assert not (killed / "done").exists() and [r["step"] for r in comparable_records(killed)] == [0, 2]
    train(cfg(killed))
    assert comparable_records(killed) == comparable_records(whole)
    a, b = (torch.load(run / "resume.pt", weights_only=True)["algorithm"] for run in (whole, killed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a longer schedule reweighs every update already made: --extend is refused in one line
    code = run(["train", "--config", str(whole / "config.json"), "--steps", "8", "--extend"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--extend: CLIPood weighs every update" in err, err
