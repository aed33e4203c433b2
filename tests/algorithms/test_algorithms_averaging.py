"""The one weight-averaging rule (`dgmoe.algorithms.averaging`) that soups, WiSE-FT, SWAD and SMA share: float
entries averaged in float64 and cast to the reference's dtype (the mean of equal members is each of them, bit for
bit, -0.0 included), integer buffers the reference's, weights normalised, and the running form equal to the mean
of the members it saw."""
from __future__ import annotations

import pytest
import torch

from dgmoe.algorithms.averaging import CHUNK, mean_of, running_mean_, weighted_mean
from dgmoe.posthoc.wise_ft import interpolate


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def test_the_mean_of_equal_members_is_each_of_them_bit_for_bit():
    x = torch.randn(1000)
    x[::3] = -0.0
    assert torch.equal(_bits(mean_of([x, x, x])), _bits(x))
    half = x.to(torch.bfloat16)
    assert mean_of([half, half]).dtype == torch.bfloat16 and torch.equal(_bits(mean_of([half, half])), _bits(half))


def test_the_mean_is_taken_in_float64_and_weighted():
    xs = [torch.randn(50) * 10 ** k for k in range(4)]
    expected = sum(x.double() for x in xs) / 4
    assert torch.equal(mean_of(xs), expected.float())
    weights = [1.0, 3.0, 0.0, 4.0]
    weighted = sum(w * x.double() for w, x in zip(weights, xs)) / 8.0
    assert torch.equal(mean_of(xs, weights), weighted.float())
    assert not torch.equal(mean_of(xs), mean_of(xs, weights))  # the weights count
    with pytest.raises(ValueError, match="do not sum to 0"):
        mean_of(xs, [0.0] * 4)


def test_a_mean_over_chunks_equals_the_whole():
    xs = [torch.randn(CHUNK + 77) for _ in range(3)]
    whole = ((xs[0].double() + xs[1].double() + xs[2].double()) / 3).float()
    assert torch.equal(mean_of(xs), whole)


def test_integer_buffers_and_dtypes_are_the_references():
    a = {"w": torch.ones(3), "n": torch.tensor(5), "h": torch.zeros(2, dtype=torch.float16)}
    b = {"w": torch.zeros(3, dtype=torch.float64), "n": torch.tensor(9), "h": torch.ones(2, dtype=torch.float16)}
    first, second = weighted_mean([a, b]), weighted_mean([a, b], reference=1)
    assert int(first["n"]) == 5 and int(second["n"]) == 9
    assert first["w"].dtype == torch.float32 and second["w"].dtype == torch.float64
    assert torch.equal(first["w"], torch.full((3,), 0.5)) and torch.equal(first["h"], torch.full((2,), 0.5).half())
    with pytest.raises(ValueError, match="different entries"):
        weighted_mean([a, {"w": torch.ones(3)}])


def test_wise_ft_is_the_weighted_mean_with_the_fine_tuned_network_as_reference():
    zero_shot, fine_tuned = {"w": torch.randn(20), "n": torch.tensor(1)}, {"w": torch.randn(20), "n": torch.tensor(2)}
    mixed = interpolate(zero_shot, fine_tuned, 0.3)
    assert torch.equal(mixed["w"], (0.7 * zero_shot["w"].double() + 0.3 * fine_tuned["w"].double()).float())
    assert int(mixed["n"]) == 2
    assert torch.equal(_bits(interpolate(zero_shot, fine_tuned, 0.0)["w"]), _bits(zero_shot["w"]))
    assert torch.equal(_bits(interpolate(zero_shot, fine_tuned, 1.0)["w"]), _bits(fine_tuned["w"]))


def test_the_running_form_is_the_mean_of_what_it_saw():
    xs = [torch.randn(30) for _ in range(5)]
    average = [xs[0].clone()]
    for k, x in enumerate(xs[1:], start=2):
        running_mean_(average, [x], k)
    assert torch.allclose(average[0], mean_of(xs), atol=1e-6)
    weighted = [xs[0].clone()]  # weight 1, then xs[1] with weight 3: (x0 + 3 x1) / 4
    running_mean_(weighted, [xs[1]], 4.0, 3.0)
    assert torch.allclose(weighted[0], mean_of(xs[:2], [1.0, 3.0]), atol=1e-6)
