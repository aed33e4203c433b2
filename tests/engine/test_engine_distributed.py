"""N processes (gloo) train on the global batch exactly as one process does.

Two levels: (1) every algorithm on a tiny GMoE with stochastic depth 0.1 and gate noise on, stepped by 2
spawned processes on shards of the same minibatches, against the same steps in this process; (2) the whole
engine under torchrun (`dgmoe train`) for GMoE, records and weights against a one-process run.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.two_processes import run_on_two_processes
from safetensors.torch import load_file

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.algorithms.mmd import KERNEL_GAMMAS
from dgmoe.algorithms.rdm import RDM_GAMMAS
from dgmoe.data.base import Batch
from dgmoe.engine.distributed import DistInfo, average_metrics, make_gradient_averager, shard
from dgmoe.engine.hparams import default_hparams
from dgmoe.models import create_model

NUM_CLASSES, NUM_DOMAINS, BATCH, STEPS = 3, 3, 4, 5
FAST = dict(irm_penalty_anneal_iters=1, vrex_penalty_anneal_iters=1, penalty_anneal_iters=1,
            rdm_penalty_anneal_iters=1, sma_start_iter=1, swad_n_converge=1, swad_n_tolerance=2, irm_lambda=10.0,
            vrex_lambda=10.0, d_steps_per_g_step=1, grad_penalty=0.1, lr=1e-3, lr_g=1e-3, lr_d=1e-3)
FAST.update(ib_penalty_anneal_iters=1, eqrm_burnin_iters=1)  # IB_ERM, IB_IRM, EQRM: cross the switch too
FAST.update(tau=0.5)  # ANDMask, SANDMask: a mask that is neither all ones nor all zeros
# IGA: at its default penalty 1000 the gradients reach ~1e4, so the rounding noise of entries that are zero in
# exact arithmetic (a router's rows of unchosen experts) exceeds Adam's eps and becomes lr-sized steps that
# differ with the process count; at 1e-2 the penalty is still half the loss and the noise stays below eps.
FAST.update(penalty=1e-2)
# ERM++'s linear probe and averaging, TRM's penalty within the 5 steps; 2 adversary steps for Transfer; CAD on
# normalised features: its default logits |z|^2 / T (~300 for this model) turn the float32 rounding of the
# weights (1e-7 after a few steps) into ~1e-5 of its loss, the tolerance here.
FAST.update(linear_steps=1, ermpp_sma_start_iter=2, iters=1, d_steps_per_g=2, is_normalized=True)
# MMD, CausIRL_MMD, RDM: DomainBed's squared distances (the default) leave rounding residue where a sample meets
# itself (|a|^2 - 2 a.a + |a|^2, ~u |a|^2), which exp(-1000 d) turns into ~5e-4 of the penalty; that residue
# is not a function of the samples but of the matmul that computed them, so it differs with the process count.
# dgmoe's exact self-distances ('zero', the same function in exact arithmetic) test the sharding itself.
FAST.update(kernel_self_distance="zero")
VAL_LOSSES = [3.0, 2.0, 2.5, 9.0, 9.0]
#: every float32 quantity's budget for 1 against 2 processes after 5 steps: relative, 1e-5 (~170 units of
#: float32 rounding, 2^-24, for the different summation orders of the two runs and their drift over the steps).
RELATIVE = 1e-5
#: The Gaussian-kernel penalties need an absolute budget, derived here, not measured. MMD^2 = E k(a, a') +
#: E k(b, b') - 2 E k(a, b) with k = sum_{g in G} exp(-g d), d a squared distance: terms of order |G| cancel
#: down to the penalty, so an error relative to the penalty says nothing (with a 1e-5 budget, CausIRL_MMD's
#: penalty failed on some CPUs by 1.1e-5). Bound it through the terms instead. A relative error r of d changes
#: exp(-g d) by g d exp(-g d) r <= r / e (x exp(-x) <= 1/e), whatever the bandwidth g; the means' weights sum
#: to 1 + 1 + 2 = 4, so with r = RELATIVE the penalty moves by at most 4 |G| RELATIVE / e (1.0e-4 for MMD's 7
#: bandwidths, 1.2e-4 for RDM's 8), and a loss that adds w x penalty by w times that. Measured 1 vs 2
#: processes: at most 2.1e-5, with AVX-512, AVX2 or SSE kernels (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS,
#: DNNL_MAX_CPU_ISA).
KERNEL_PENALTIES = {"MMD": ("penalty", KERNEL_GAMMAS, "mmd_gamma"),
                    "CausIRL_MMD": ("penalty", KERNEL_GAMMAS, "mmd_gamma"),
                    "RDM": ("matching_penalty", RDM_GAMMAS, "rdm_lambda")}


def absolute_budget(name: str, key: str, hparams: dict) -> float:
    """The absolute tolerance of a record key beside RELATIVE: 1e-5, or a kernel penalty's bound (above)."""
    if name not in KERNEL_PENALTIES:
        return 1e-5
    penalty, gammas, weight = KERNEL_PENALTIES[name]
    bound = 4 * len(gammas) * RELATIVE / math.e
    return max(1e-5, {penalty: bound, "loss": hparams[weight] * bound}.get(key, 0.0))
#: every algorithm: the DG penalties compute their batch statistics over the global batch; SWAD/SMA/MIRO/
#: Mixup/Fish/MLDG/DANN only need the per-sample randomness and the MoE statistics to be global.
#: MoGE needs metadata batches, CLIPood a text head (tested apart)
ALGORITHMS = [a for a in list_algorithms() if a != "MoGE" and not get_algorithm(a).NEEDS_TEXT_HEAD]


def tiny_gmoe():
    torch.manual_seed(0)
    return create_model("gmoe_tiny_patch16_224", num_classes=NUM_CLASSES, img_size=16, patch_size=4, depth=2,
                        embed_dim=32, num_heads=2, moe_layers=[1], drop_path_rate=0.1)


def minibatches(step):
    """Images and labels, and a location per image (lat/lon only, from a generator of their own so the images
    and labels are those of the batches without metadata; D3G_WRAP reads them, the others ignore them)."""
    g, loc = torch.Generator().manual_seed(step), torch.Generator().manual_seed(10_000 + step)
    out = []
    for d in range(NUM_DOMAINS):
        x, y = torch.randn(BATCH, 3, 16, 16, generator=g) + d, torch.randint(0, NUM_CLASSES, (BATCH,), generator=g)
        meta = {"lat": torch.rand(BATCH, generator=loc) * 160 - 80, "lon": torch.rand(BATCH, generator=loc) * 340 - 170}
        out.append(Batch(x, y, meta))
    return out


def hparams_of(name):
    hp = default_hparams(name, "PACS", "gmoe_tiny_patch16_224")
    hp.update({k: v for k, v in FAST.items() if k in hp})
    return hp


def run_steps(name, info):
    hp = hparams_of(name)
    alg = get_algorithm(name)(tiny_gmoe(), NUM_CLASSES, NUM_DOMAINS, hp)
    if info.enabled:
        alg.gradient_sync = make_gradient_averager(alg, info)
    torch.manual_seed(123)  # one stream for the whole run, as the engine: every rank draws the same numbers
    np.random.seed(123)
    alg.train()
    records = []
    for step in range(STEPS):
        metrics = average_metrics(alg.update(shard(minibatches(step), info), step), info)
        alg.on_checkpoint(step, VAL_LOSSES[step] if alg.NEEDS_VAL_LOSS else None)
        records.append(metrics)
    alg.eval()
    with torch.no_grad():
        test = minibatches(99)[0]
        logits = alg.predict(test.x, test.meta)
    return records, logits


def _every_algorithm(rank, world):
    return {name: run_steps(name, DistInfo(rank, world)) for name in ALGORITHMS}


@pytest.mark.slow  # ~20 s: CI runs it with -m slow
def test_every_algorithm_on_two_processes_equals_one_process(tmp_path):
    two = run_on_two_processes(_every_algorithm, tmp_path)
    for name in ALGORITHMS:
        records, logits = run_steps(name, DistInfo())
        hp = hparams_of(name)
        for step, (a, b) in enumerate(zip(records, two[name][0])):
            assert a.keys() == b.keys()
            for key in a:
                assert math.isfinite(a[key]), (name, step, key)
                assert b[key] == pytest.approx(a[key], rel=RELATIVE, abs=absolute_budget(name, key, hp)), (
                    name, step, key, a[key], b[key])
        torch.testing.assert_close(two[name][1], logits, rtol=1e-5, atol=1e-5, msg=name)


def test_shards_carry_their_place_in_the_global_batch():
    batches = minibatches(0)
    parts = [shard(batches, DistInfo(r, 2)) for r in range(2)]
    for d in range(NUM_DOMAINS):
        assert [p[d].shard.index.tolist() for p in parts] == [[0, 1], [2, 3]]
        assert parts[0][d].shard.size == BATCH
        assert torch.equal(torch.cat([p[d].x for p in parts]), batches[d].x)


# ----- the engine under torchrun ------------------------------------------------------------------

def _train(out, nproc, model="gmoe_micro_patch7_28", model_kwargs='{"depth": 2, "moe_layers": [1]}'):
    args = ["-m", "dgmoe", "train", "--dataset", "RotatedMNIST", "--model", model, "--model-kwargs", model_kwargs,
            "--hparams", '{"drop_path_rate": 0.1}', "--steps", "5", "--checkpoint-freq", "2", "--n-per-domain", "40",
            "--num-threads", "1", "--output-dir", str(out), "--progress", "none"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, *args]
    else:
        # torchrun of this interpreter's torch (a `torchrun` on PATH may belong to another environment)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_two_processes_match_one_process_for_gmoe_with_drop_path_and_gate_noise(tmp_path):
    one = _train(tmp_path / "one", 1)
    two = _train(tmp_path / "two", 2)
    assert [r["step"] for r in one] == [r["step"] for r in two] == [0, 2, 4]
    assert one[0]["hparams"]["drop_path_rate"] == 0.1
    for a, b in zip(one, two):
        for key in ("loss", "loss_task", "loss_aux"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), key
        for key in a:
            if key.endswith("_acc"):
                assert a[key] == pytest.approx(b[key], abs=1e-5), key
    wa = load_file(str(tmp_path / "one" / "model.safetensors"))
    wb = load_file(str(tmp_path / "two" / "model.safetensors"))
    for k in wa:  # float rounding only: relative to each tensor's scale
        diff = (wa[k] - wb[k]).abs()
        if k.endswith("attn.qkv.bias"):
            # The key bias cannot change the attention (softmax is shift invariant): its exact gradient is 0,
            # so its rounding noise, which differs between 1 and 2 processes, is all Adam sees and steps on.
            dim = diff.numel() // 3
            diff = torch.cat([diff[:dim], diff[2 * dim:]])
        assert float(diff.max()) <= 1e-4 * float(wa[k].abs().max()) + 1e-7, k
    # only rank 0 writes: one results file, no stray files from rank 1
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
