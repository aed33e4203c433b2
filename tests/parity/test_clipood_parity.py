"""dgmoe's CLIPood Beta moving average against the authors' `GeneralMovingAverage` (thuml/CLIPood, recorded by
tests/parity/record_clipood.py): the Beta weights and the online average after T updates."""
import json
from pathlib import Path

import pytest
import torch

from dgmoe.algorithms.clipood import beta_average_step_, beta_weight

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "clipood_bma.json").read_text())


def test_beta_weights_are_the_authors():
    total, beta = FIXTURE["total_iter"], FIXTURE["beta"]
    for i, w in enumerate(FIXTURE["weights"]):
        assert beta_weight(i, total, beta) == pytest.approx(w, rel=1e-12)


def test_online_average_is_the_authors():
    total, beta = FIXTURE["total_iter"], FIXTURE["beta"]
    thetas = [[torch.tensor(t, dtype=torch.float64) for t in theta] for theta in FIXTURE["thetas"]]
    average = [t.clone() for t in thetas[0]]
    weight_sum = beta_weight(0, total, beta)
    for i, theta in enumerate(thetas[1:], start=1):
        weight = beta_weight(i, total, beta)
        beta_average_step_(average, theta, weight, weight_sum)
        weight_sum += weight
    for mine, theirs in zip(average, FIXTURE["average"]):
        torch.testing.assert_close(mine, torch.tensor(theirs, dtype=torch.float64), rtol=0, atol=1e-12)
