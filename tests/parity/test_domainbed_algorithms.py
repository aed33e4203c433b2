"""dgmoe's algorithms equal DomainBed's real code: weights after 3 updates, LayerNorm and BatchNorm featurizers.

The fixture (numbers only) was recorded from DomainBed by `record_domainbed_algorithms.py` (its header says
how to regenerate it). Each case starts from the recorded weights, seeds torch and numpy as the recorder did,
runs dgmoe's algorithm (its default hyperparameters, then the case's) on the recorded batches and must land on
DomainBed's weights within 1e-6 relative. Both sides run in float64, so that rounding cannot hide (or fake) a
difference in the algorithm; the `*_float32` cases run MMD's and RDM's kernels in float32, whose DomainBed
numbers depend on rounding (`RELATIVE_TOLERANCE`).
"""
from __future__ import annotations

import json
import operator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from parity_nets import (
    FEATURIZERS,
    N_FEATURES,
    N_UPDATES,
    NUM_CLASSES,
    NUM_DOMAINS,
    float_state,
)
from safetensors.torch import load_file

from dgmoe.algorithms import get_algorithm
from dgmoe.data.base import Batch
from dgmoe.engine.hparams import default_hparams

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "domainbed_algorithms"
BATCHES = load_file(str(FIXTURES / "batches.safetensors"))
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))
#: (case, featurizer) for every recorded run (the float32 cases are recorded on the BatchNorm featurizer only)
RUNS = [(c, f) for c in CASES for f in sorted(json.loads((FIXTURES / f"{c}.json").read_text())["outputs"])]
#: float64: what remains is the algorithm, not rounding. float32 (the `*_float32` cases, MMD's, CausIRL_MMD's
#: and RDM's Gaussian kernels on the BatchNorm featurizer): DomainBed's own float32 numbers depend on how the
#: machine rounds, since its squared distance of a sample to itself, |a|^2 - 2 a.a + |a|^2, is rounding noise
#: that exp(-1000 d) and Adam's normalisation carry into the weights. On the recording machine (AVX-512) dgmoe's
#: default reproduces MMD and CausIRL_MMD bit for bit and RDM within 2.1e-5 (its gradient reaches the logits
#: through one cross-entropy, DomainBed's through two); run with AVX2 or SSE kernels (ATEN_CPU_CAPABILITY,
#: MKL_ENABLE_INSTRUCTIONS, DNNL_MAX_CPU_ISA) the same comparison gives up to 1.3e-4. 5e-4 covers that
#: machine spread; dgmoe's `kernel_self_distance='zero'` variant moves RDM by 1.5e-3 (any of those kernels).
RELATIVE_TOLERANCE = {"float64": 1e-6, "float32": 5e-4}


class ParityNetwork(nn.Module):
    """A parity featurizer plus a linear head, behind dgmoe's backbone contract."""

    uses_metadata = False

    def __init__(self, featurizer: str):
        super().__init__()
        self.featurizer = FEATURIZERS[featurizer]()
        self.head = nn.Linear(N_FEATURES, NUM_CLASSES)
        self.num_features = N_FEATURES

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.featurizer(x)

    def forward_head(self, z: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return z if pre_logits else self.head(z)

    def get_classifier(self) -> nn.Module:
        return self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.featurizer(x))


def recorded(tensors: dict, featurizer: str, stage: str, group: str) -> list[torch.Tensor]:
    out, i = [], 0
    while f"{featurizer}/{stage}/{group}/{i}" in tensors:
        out.append(tensors[f"{featurizer}/{stage}/{group}/{i}"])
        i += 1
    return out


def modules_of(algorithm, network: ParityNetwork, extras: dict[str, str]) -> dict[str, nn.Module]:
    mods = {"featurizer": network.featurizer, "classifier": network.head}
    for group, attribute in extras.items():
        mods[group] = operator.attrgetter(attribute)(algorithm)
    return mods


def batches(update: int, dtype: torch.dtype) -> list[Batch]:
    return [Batch(BATCHES[f"{update}/{d}/x"].to(dtype), BATCHES[f"{update}/{d}/y"].clone()) for d in range(NUM_DOMAINS)]


@pytest.fixture
def default_dtype():
    """Sets torch's default dtype for the test (the fixture's), restores it after."""
    previous = torch.get_default_dtype()
    yield torch.set_default_dtype
    torch.set_default_dtype(previous)


SHARED = {"ERM", "IRM", "GroupDRO", "Mixup", "MLDG", "CORAL", "MMD", "DANN", "CDANN", "VREx", "RDM", "Fish", "Fishr"}
SHARED |= {"ARM", "SagNet", "RSC", "CAD", "CondCAD", "TRM", "Transfer", "URM", "ADRMX", "ERMPlusPlus"}


def test_every_shared_algorithm_has_a_fixture():
    assert {json.loads((FIXTURES / f"{c}.json").read_text())["algorithm"] for c in CASES} >= SHARED


def test_andmask_to_ib_irm_have_fixtures():
    """DomainBed's ANDMask, SANDMask, IGA, SD, SelfReg, MTL, CausIRL_*, EQRM and IB_* all match (none excluded)."""
    assert {json.loads((FIXTURES / f"{c}.json").read_text())["algorithm"] for c in CASES} >= {
        "ANDMask", "SANDMask", "IGA", "SD", "SelfReg", "MTL", "CausIRL_CORAL", "CausIRL_MMD", "EQRM", "IB_ERM",
        "IB_IRM"}


def errors_against_domainbed(case: str, featurizer: str, **overrides) -> list[tuple[str, int, float, float]]:
    """Run dgmoe's algorithm on a recorded case (the fixture's hparams, then `overrides`) in the case's dtype;
    (module group, tensor index, relative error against DomainBed, relative move of the 3 updates) per tensor."""
    info = json.loads((FIXTURES / f"{case}.json").read_text())
    tensors = load_file(str(FIXTURES / f"{case}.safetensors"))
    dtype = getattr(torch, info["dtype"])
    torch.set_default_dtype(dtype)
    network = ParityNetwork(featurizer)
    hparams = {**default_hparams(info["algorithm"], "PACS", "vit_tiny_patch16_224"), **info["hparams"], **overrides}
    algorithm = get_algorithm(info["algorithm"])(network, NUM_CLASSES, NUM_DOMAINS, hparams)
    modules = modules_of(algorithm, network, info["extras"])
    for group, module in modules.items():
        targets, values = float_state(module), recorded(tensors, featurizer, "init", group)
        assert len(targets) == len(values), f"{group}: {len(targets)} tensors in dgmoe, {len(values)} recorded"
        with torch.no_grad():
            for t, v in zip(targets, values):
                t.copy_(v)
    algorithm.train()
    torch.manual_seed(info["seeds"]["updates (torch and numpy)"])
    np.random.seed(info["seeds"]["updates (torch and numpy)"])
    for update in range(N_UPDATES):
        algorithm.update(batches(update, dtype), update)
    out = []
    for group, module in modules.items():
        initial = recorded(tensors, featurizer, "init", group)
        for i, (mine, theirs) in enumerate(zip(float_state(module), recorded(tensors, featurizer, "final", group))):
            scale = theirs.abs().max().clamp_min(1e-12)
            out.append((group, i, float((mine - theirs).abs().max() / scale),
                        float((theirs - initial[i]).abs().max() / scale)))
    return out


@pytest.mark.parametrize("case,featurizer", RUNS)
def test_weights_after_three_updates_equal_domainbed(case: str, featurizer: str, default_dtype) -> None:
    dtype = json.loads((FIXTURES / f"{case}.json").read_text())["dtype"]
    for group, i, error, moved in errors_against_domainbed(case, featurizer):
        assert error <= RELATIVE_TOLERANCE[dtype], (
            f"{case}/{featurizer}: {group} tensor {i} differs from DomainBed by {error:.2e} relative "
            f"(the 3 updates moved it by {moved:.2e})")


def test_float32_cases_cover_the_kernels_and_the_zero_self_distance_variant_leaves_domainbed(default_dtype):
    """The default (`kernel_self_distance='domainbed'`) is what the float32 fixtures hold; dgmoe's 'zero' variant
    (exact self-distances, plain differences of RDM's scalar losses) is not DomainBed's float32 run."""
    assert {c for c, f in RUNS if c.endswith("_float32")} == {"MMD_float32", "CausIRL_MMD_float32", "RDM_float32"}
    errors = errors_against_domainbed("RDM_float32", "batchnorm", kernel_self_distance="zero")
    assert max(e for _, _, e, _ in errors) > 2 * RELATIVE_TOLERANCE["float32"]
