"""Behaviour guard: micro ViT and GMoE ERM runs give the records dgmoe gave before the redesign.

`tests/golden/erm_micro_records.json` was recorded by dgmoe 0.1 (before `RunConfig`, the step loop and the
one sparse-layer family). Accuracies must match exactly and losses to 1e-5 relative, so a change of data
order, initialisation, augmentation, hyperparameters, routing or evaluation fails here (on this project's
CPU torch the records are bit-identical; the tolerance only absorbs another BLAS)."""
import json
from pathlib import Path

import pytest
import torch

from dgmoe.engine import train

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "erm_micro_records.json").read_text())
#: what `nn.init.trunc_normal_(torch.empty(6), std=0.02)` drew after `torch.manual_seed(0)` on the torch that
#: made these records (2.13). torch 2.12 replaced its inverse-CDF sampler (timm's, and torch <= 2.11's) by
#: rejection sampling, so the initial weights, and every record after them, depend on the torch version.
TRUNC_NORMAL_DRAWS = [0.03081992, -0.00586858, -0.04357579, 0.01136863, -0.02169045, -0.02797191]


def _same_initialisation_as_the_records() -> bool:
    torch.manual_seed(0)
    draws = torch.nn.init.trunc_normal_(torch.empty(6), std=0.02).tolist()
    return draws == pytest.approx(TRUNC_NORMAL_DRAWS, abs=1e-8)


@pytest.mark.parametrize("model", sorted(GOLDEN["runs"]))
def test_micro_erm_records_are_unchanged(tmp_path, model):
    if not _same_initialisation_as_the_records():
        pytest.skip(f"torch {torch.__version__}'s nn.init.trunc_normal_ draws other initial weights than the torch "
                    "that made the golden records (its sampler changed in torch 2.12)")
    result = train(dataset="RotatedMNIST", model=model, model_kwargs={"depth": 4}, hparams={"drop_path_rate": 0.1},
                   steps=30, checkpoint_freq=10, n_per_domain=60, num_threads=1, progress="none",
                   output_dir=str(tmp_path / model))
    golden = GOLDEN["runs"][model]
    assert result.records[0]["hparams"] == golden["hparams"]
    assert len(result.records) == len(golden["records"])
    for got, want in zip(result.records, golden["records"]):
        assert set(want) <= set(got), set(want) - set(got)
        for key, value in want.items():
            if key.endswith("_acc") or key in ("step", "epoch"):
                assert got[key] == value, (want["step"], key)
            else:
                assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (want["step"], key)
