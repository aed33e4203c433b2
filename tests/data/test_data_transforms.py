"""DomainBed's augmentation and eval transform without torchvision: shapes, ranges, known answers."""
from __future__ import annotations

import colorsys
import math
import random

import pytest
import torch
import torch.nn.functional as F

from dgmoe.data import get_transforms
from dgmoe.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EvalTransform,
    ToFloat,
    TrainTransform,
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    eval_transform,
    hsv_to_rgb,
    resized_crop,
    resized_crop_params,
    rgb_to_hsv,
    train_transform,
)

MEAN = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def images(b=6, size=20, seed=0) -> torch.Tensor:
    return torch.randint(0, 256, (b, 3, size, size), generator=gen(seed), dtype=torch.uint8)


def test_train_shapes_ranges_and_determinism():
    tf = train_transform(16)
    x = images(size=24)
    a, b, c = tf(x, gen(1)), tf(x, gen(1)), tf(x, gen(2))
    assert a.shape == (6, 3, 16, 16) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    unnorm = a * STD + MEAN
    assert unnorm.min() >= -1e-5 and unnorm.max() <= 1 + 1e-5
    single = tf(x[0], gen(1))
    assert single.shape == (3, 16, 16)


def test_eval_is_resize_scale_normalise():
    x = torch.full((2, 3, 8, 8), 200, dtype=torch.uint8)
    out = eval_transform(4)(x)
    expected = (200 / 255 - MEAN) / STD
    assert out.shape == (2, 3, 4, 4)
    torch.testing.assert_close(out, expected.expand(2, 3, 4, 4), atol=1e-6, rtol=0)
    y = images(1, 8)
    torch.testing.assert_close(EvalTransform(8)(y), (y.float() / 255 - MEAN) / STD)


def test_to_float():
    x = torch.tensor([[[0, 51, 255]]], dtype=torch.uint8)
    torch.testing.assert_close(ToFloat()(x), torch.tensor([[[0.0, 0.2, 1.0]]]))


def test_crop_params_follow_scale_and_ratio():
    top, left, h, w = resized_crop_params(2000, 50, 50, (0.7, 1.0), (3 / 4, 4 / 3), gen(0))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 50).all() and (left + w <= 50).all()
    area = (h * w).double() / 2500
    assert area.min() >= 0.66 and area.max() <= 1.0  # 0.7 up to rounding of h and w
    ratio = w.double() / h.double()
    assert ratio.min() >= 0.70 and ratio.max() <= 1.43
    # the first fitting attempt is kept, which favours smaller areas: compare with a scalar simulation
    rng = random.Random(0)

    def reference_area() -> float:
        for _ in range(10):
            s, r = rng.uniform(0.7, 1.0), math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(2500 * s * r))), int(round(math.sqrt(2500 * s / r)))
            if 0 < cw <= 50 and 0 < ch <= 50:
                return cw * ch / 2500
        return 1.0

    expected = sum(reference_area() for _ in range(20000)) / 20000
    assert abs(area.mean().item() - expected) < 0.006


def test_crop_equals_interpolate_of_the_crop():
    x = torch.rand(4, 3, 20, 20)
    params = resized_crop_params(4, 20, 20, (0.3, 1.0), (3 / 4, 4 / 3), gen(5))
    out = resized_crop(x, *params, 20)
    for b, (top, left, h, w) in enumerate(zip(*params)):
        crop = x[b:b + 1, :, top:top + h, left:left + w]
        ref = F.interpolate(crop, size=(20, 20), mode="bilinear", align_corners=False)
        torch.testing.assert_close(out[b:b + 1], ref, atol=1e-5, rtol=0)
    flipped = resized_crop(x, *params, 20, flip=torch.tensor([True, False, True, False]))
    torch.testing.assert_close(flipped[0], out[0].flip(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(flipped[1], out[1], atol=0, rtol=0)


def test_flip_and_grayscale_rates():
    tf = TrainTransform(4, mean=(0, 0, 0), std=(1, 1, 1), scale=(1, 1), ratio=(1, 1), jitter=(0, 0, 0, 0))
    x = torch.zeros(4000, 3, 4, 4, dtype=torch.uint8)
    x[:, 0, :, 0] = 255  # red left column: a flip moves it right
    x[:, 1, :, 1] = 100
    out = tf(x, gen(0))
    flipped = out[:, 0, 0, 3] > 0.1  # red (1.0) or its gray (0.299) moved to the right
    gray = (out[:, 0] == out[:, 1]).all(-1).all(-1) & (out[:, 1] == out[:, 2]).all(-1).all(-1)
    assert 0.46 < flipped.float().mean() < 0.54
    assert 0.08 < gray.float().mean() < 0.12
    kept = ~gray & ~flipped
    left_column = out[kept][:, :, :, 0]  # untouched images keep a pure red left column
    assert torch.equal(left_column, torch.tensor([1.0, 0, 0]).view(1, 3, 1).expand_as(left_column))


def test_colour_ops_known_answers():
    x = torch.tensor([0.2, 0.4, 0.6]).view(1, 3, 1, 1).repeat(1, 1, 2, 2)
    torch.testing.assert_close(adjust_brightness(x, torch.tensor([2.0])), (x * 2).clamp(0, 1))
    gray = 0.299 * 0.2 + 0.587 * 0.4 + 0.114 * 0.6
    torch.testing.assert_close(adjust_saturation(x, torch.tensor([0.0])), torch.full_like(x, gray))
    torch.testing.assert_close(adjust_contrast(x, torch.tensor([0.0])), torch.full_like(x, gray))
    red = torch.tensor([1.0, 0, 0]).view(1, 3, 1, 1)
    torch.testing.assert_close(adjust_hue(red, torch.tensor([1 / 3])), torch.tensor([0.0, 1, 0]).view(1, 3, 1, 1))
    torch.testing.assert_close(adjust_hue(red, torch.tensor([-1 / 3])), torch.tensor([0.0, 0, 1]).view(1, 3, 1, 1))


@pytest.mark.parametrize("channels", [3, 1])
def test_jitter_applies_each_images_adjustments_in_its_drawn_order(channels):
    """The batched jitter (one linear pass per position for brightness, contrast and saturation, hue on its
    rows) equals applying torchvision's four adjustments to each image alone, in that image's random order."""
    tf = TrainTransform(12)
    x = torch.rand(16, channels, 12, 12, generator=gen(3))
    g = gen(7)
    order, u = torch.rand(16, 4, generator=g).argsort(1), torch.rand(16, 4, generator=g)
    factors = torch.stack([0.7 + 0.6 * u[:, 0], 0.7 + 0.6 * u[:, 1], 0.7 + 0.6 * u[:, 2], -0.3 + 0.6 * u[:, 3]], 1)
    got = tf._jitter(x.clone(), order, factors)
    ops = (adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue)
    for i in range(16):
        image = x[i:i + 1]
        for op in order[i].tolist():
            if channels == 3 or op < 2:  # saturation and hue need RGB
                image = ops[op](image, factors[i, op:op + 1])
        torch.testing.assert_close(got[i:i + 1], image, atol=1e-6, rtol=0)


def test_hsv_matches_colorsys():
    x = torch.rand(1, 3, 5, 5, generator=gen(0))
    x[0, :, 0, 0] = torch.tensor([0.5, 0.5, 0.1])  # ties between channels
    x[0, :, 0, 1] = 0.3  # gray: hue 0
    hsv = rgb_to_hsv(x)[0].permute(1, 2, 0).reshape(-1, 3)
    ref = torch.tensor([colorsys.rgb_to_hsv(*p) for p in x[0].permute(1, 2, 0).reshape(-1, 3).tolist()])
    torch.testing.assert_close(hsv, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(hsv_to_rgb(rgb_to_hsv(x)), x, atol=1e-6, rtol=0)
    shifted = adjust_hue(x, torch.tensor([0.25]))[0].permute(1, 2, 0).reshape(-1, 3)
    ref = torch.tensor([colorsys.hsv_to_rgb((h + 0.25) % 1, s, v) for h, s, v in ref.tolist()])
    torch.testing.assert_close(shifted, ref, atol=1e-6, rtol=0)


def test_storage_larger_than_model_input_is_resized_first():
    out = train_transform(8)(images(3, 32), gen(0))
    assert out.shape == (3, 3, 8, 8)
    assert eval_transform(8)(images(3, 32)).shape == (3, 3, 8, 8)


def test_get_transforms_by_dataset():
    tr, ev = get_transforms("PACS", 32)
    assert isinstance(tr, TrainTransform) and isinstance(ev, EvalTransform) and tr.img_size == 32
    tr, ev = get_transforms("PACS", 32, data_augmentation=False)
    assert tr is ev
    tr, ev = get_transforms("RotatedMNIST", 28)
    assert isinstance(tr, ToFloat) and isinstance(ev, ToFloat)


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        eval_transform(4)(torch.zeros(4, 4, dtype=torch.uint8))


def test_augmenting_on_a_device_reads_nothing_back_and_copies_asynchronously():
    """On the meta device any read of a device tensor's values (`.any()`, boolean-mask indexing, `nonzero`)
    raises, so the batch-wide augmentation runs there only if every decision is taken on the CPU draws; and
    every CPU -> device copy it makes is non-blocking (a blocking one waits for the GPU: a host sync)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class BlockingCopies(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default and args[0].device.type == "cpu" \
                    and kwargs.get("device", args[0].device).type != "cpu" and not kwargs.get("non_blocking"):
                self.found.append(str(func))
            return func(*args, **kwargs)

    x = torch.randint(0, 255, (12, 3, 16, 16), dtype=torch.uint8).to("meta")
    with BlockingCopies() as mode:
        out = train_transform(16)(x, generator=torch.Generator().manual_seed(0))
        evaluated = eval_transform(16)(x)
    assert out.shape == evaluated.shape == (12, 3, 16, 16) and out.device.type == "meta"
    assert mode.found == []
