"""dgmoe's FLYP loss against the authors' `ClipLoss` (locuslab/FLYP, recorded by tests/parity/record_flyp.py)."""
import json
from pathlib import Path

import pytest
import torch

from dgmoe.algorithms.flyp import clip_loss

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "flyp_loss.json").read_text())


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"scale={c['scale']:.3g}")
def test_loss_is_the_authors(case):
    image = torch.tensor(FIXTURE["image"], dtype=torch.float64)
    text = torch.tensor(FIXTURE["text"], dtype=torch.float64)
    loss = clip_loss(image, text, torch.tensor(case["scale"], dtype=torch.float64))
    assert float(loss) == pytest.approx(case["loss"], rel=1e-12)
