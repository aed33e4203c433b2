"""LP-FT (Kumar et al., ICLR 2022): the first `linear_steps` updates move the head alone, with the probe's own
optimiser; later updates fine-tune the whole network from the probed head (or, under --peft, what the mode
trains); one command: `dgmoe train --algorithm LPFT`."""
import pytest
import torch
from test_algorithms_train import NUM_CLASSES, NUM_DOMAINS, minibatches, tiny

from dgmoe.algorithms import get_algorithm
from dgmoe.engine.hparams import default_hparams
from dgmoe.models.info import model_info
from dgmoe.peft.config import PeftConfig


def _build(peft=None, linear_steps=2):
    network = tiny("vit_tiny_patch16_224", 0, peft)
    hp = default_hparams("LPFT", "PACS", model_info(network))
    hp.update(linear_steps=linear_steps, linear_lr=1e-2, lr=1e-2)
    return get_algorithm("LPFT")(network, NUM_CLASSES, NUM_DOMAINS, hp)


def _snapshot(alg):
    head = {f"head.{k}" for k, _ in alg.classifier().named_parameters()}
    params = {k: v.detach().clone() for k, v in alg.network.named_parameters()}
    return head, params


def _moved(before, alg):
    return {k for k, v in alg.network.named_parameters() if not torch.equal(before[k], v)}


@pytest.mark.parametrize("peft", [None, PeftConfig(mode="lora", rank=2, targets=("qkv",))])
def test_probe_moves_the_head_alone_then_fine_tuning_moves_the_rest(peft):
    alg = _build(peft)
    head, start = _snapshot(alg)
    for step in range(2):
        metrics = alg.update(minibatches(step), step)
        assert float(metrics["linear_probe"]) == 1.0
    assert _moved(start, alg) == head  # the probe: the head only, every head tensor
    _, probed = _snapshot(alg)
    metrics = alg.update(minibatches(2), 2)
    assert float(metrics["linear_probe"]) == 0.0
    moved = _moved(probed, alg)
    trained = {k for k, v in alg.network.named_parameters() if v.requires_grad}
    assert moved - head and moved <= trained  # fine-tuning: beyond the head, within what the run trains
    if peft is not None:
        assert all(k in head or "lora_" in k for k in moved)
    assert int(alg.update_count) == 3


def test_probe_uses_its_own_optimiser_and_leaves_the_shared_one_untouched():
    alg = _build(linear_steps=1)
    alg.update(minibatches(0), 0)
    assert alg.optimizer.state == {} and alg.linear_optimizer.state  # the shared Adam starts at fine-tuning
    alg.update(minibatches(1), 1)
    assert alg.optimizer.state


def test_lp_ft_is_one_command(tmp_path):
    from dgmoe.cli import run

    code = run(["train", "--dataset", "Debug28", "--algorithm", "LPFT", "--model", "vit_micro_patch7_28", "--img-size",
                "28", "--steps", "3", "--checkpoint-freq", "1", "--hparams", '{"batch_size": 4, "linear_steps": 2}',
                "--progress", "none", "--num-threads", "1", "--output-dir", str(tmp_path / "run")])
    assert code == 0 and (tmp_path / "run" / "done").exists()
