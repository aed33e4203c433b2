"""DomainBed's image transforms on uint8 tensors, batched, without torchvision.

Train (DomainBed/GMoE `train_transform`): RandomResizedCrop(S, scale=(0.7, 1), ratio=(3/4, 4/3)),
RandomHorizontalFlip(0.5), ColorJitter(0.3, 0.3, 0.3, 0.3), RandomGrayscale(0.1), ToTensor, ImageNet
Normalize. Eval: Resize((S, S)), ToTensor, Normalize. MNIST-type datasets get neither augmentation nor
normalisation, only `/255` (DomainBed).

Every callable takes `(x, generator=None)`: `x` uint8 (or float in [0, 1]) `[B, C, H, W]` or `[C, H, W]`
on any device; all randomness is drawn on the CPU from `generator` (the global torch RNG when None), so a
batch augmented on a GPU gets the same crops, flips and jitter factors as on the CPU. Every decision is
taken on the CPU draws and only index tensors and constants travel to the device (asynchronously), so
augmenting on a GPU never waits for it: no value of a device tensor is read back (a host synchronisation).
Differences from torchvision, kept on purpose and small:
- images are stored pre-resized to S (see `dgmoe.data.folder`), so the crop is taken from the S x S image
  rather than the original file, and works in float without re-quantising to uint8 between steps;
- the crop is resampled with one batched `grid_sample` whose sample points are exactly those of bilinear
  `F.interpolate(align_corners=False)` on the crop (coordinates clamped to the crop, as interpolate does);
- ColorJitter applies brightness/contrast/saturation/hue in a random order per image (as torchvision draws
  one order per call); hue shifts H in HSV space modulo 1, as torchvision's tensor implementation does.
Grayscale uses ITU-R 601-2 luma (0.299, 0.587, 0.114), as PIL's `convert("L")`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: CLIP's input normalisation (OpenAI's released preprocessing; OpenCLIP's weights use it too)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
GRAY_WEIGHTS = (0.299, 0.587, 0.114)


def to_device(values, like: torch.Tensor) -> torch.Tensor:
    """CPU `values` (a tensor or a sequence of numbers) on `like`'s device in its float dtype, copied without
    waiting for the device (a plain `torch.tensor(..., device=cuda)` blocks until the copy is done)."""
    cpu = torch.as_tensor(values, dtype=like.dtype if like.is_floating_point() else None)
    return cpu if like.device == cpu.device else cpu.to(like.device, non_blocking=True)


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The indices of a CPU boolean `mask`'s True rows, on `like`'s device (indexing with them reads nothing
    back, unlike indexing a device tensor with a device mask)."""
    rows = mask.nonzero().squeeze(1)
    return rows if like.device == rows.device else rows.to(like.device, non_blocking=True)


def _to_float_batch(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if x.ndim not in (3, 4):
        raise ValueError(f"expected an image [C, H, W] or a batch [B, C, H, W], got shape {tuple(x.shape)}")
    single = x.ndim == 3
    if single:
        x = x.unsqueeze(0)
    x = x.to(torch.float32).div_(255.0) if x.dtype == torch.uint8 else x.to(torch.float32, copy=True)
    return x, single


def resize(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-2:] == (size, size):
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp_(0, 1)


def normalize(x: torch.Tensor, mean, std) -> torch.Tensor:
    return x.sub(to_device(mean, x).view(1, -1, 1, 1)).div_(to_device(std, x).view(1, -1, 1, 1))


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """`[B, 1, H, W]` luma of an RGB batch (a 1-channel batch is returned as is)."""
    if x.shape[1] == 1:
        return x
    return (x * to_device(GRAY_WEIGHTS, x).view(1, 3, 1, 1)).sum(1, keepdim=True)


def resized_crop_params(b: int, height: int, width: int, scale, ratio,
                        generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchvision's RandomResizedCrop.get_params for `b` images at once: `(top, left, h, w)` long `[b]`.

    Ten attempts of area fraction ~U(scale) and log aspect ~U(log ratio); the first that fits is kept,
    otherwise a central crop clamped to the ratio range.
    """
    area = height * width
    s = scale[0] + (scale[1] - scale[0]) * torch.rand(b, 10, generator=generator, dtype=torch.float64)
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * torch.rand(b, 10, generator=generator, dtype=torch.float64))
    w = torch.round(torch.sqrt(area * s * aspect)).long()
    h = torch.round(torch.sqrt(area * s / aspect)).long()
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = ok.long().argmax(1)
    rows = torch.arange(b)
    w, h, found = w[rows, first], h[rows, first], ok.any(1)
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(height * max(ratio))), height
    else:
        fw, fh = width, height
    w = torch.where(found, w, torch.full_like(w, fw))
    h = torch.where(found, h, torch.full_like(h, fh))
    u = torch.rand(b, 2, generator=generator, dtype=torch.float64)
    top = torch.where(found, (u[:, 0] * (height - h + 1)).floor().long(), (height - h) // 2)
    left = torch.where(found, (u[:, 1] * (width - w + 1)).floor().long(), (width - w) // 2)
    return top, left, h, w


def resized_crop(x: torch.Tensor, top, left, h, w, size: int, flip: torch.Tensor | None = None) -> torch.Tensor:
    """Crop box b of image b and resize it to `size` (bilinear, align_corners=False), batched; images where
    `flip` is True are also mirrored horizontally (by reversing their sample columns, which is exact)."""
    _, _, height, width = x.shape
    centers = torch.arange(size, dtype=torch.float64) + 0.5

    def axis(start, length, extent):
        start, length = start.double()[:, None], length.double()[:, None]
        src = start + centers[None] * (length / size) - 0.5
        src = torch.minimum(torch.maximum(src, start), start + length - 1)
        return (2 * src + 1) / extent - 1

    gx, gy = axis(left, w, width), axis(top, h, height)
    if flip is not None:
        gx = torch.where(flip[:, None], gx.flip(-1), gx)
    gx, gy = to_device(gx.to(x.dtype), x), to_device(gy.to(x.dtype), x)
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


# torchvision's adjustments of one batch by one factor per image, written as its functional ops are: the
# reference that `TrainTransform._jitter`'s batched linear pass (`_linear_adjust`) is tested against
def adjust_brightness(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return (x * f.view(-1, 1, 1, 1)).clamp(0, 1)


def adjust_contrast(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    mean = grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
    f = f.view(-1, 1, 1, 1)
    return (f * x + (1 - f) * mean).clamp(0, 1)


def adjust_saturation(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    f = f.view(-1, 1, 1, 1)
    return (f * x + (1 - f) * grayscale(x)).clamp(0, 1)


def _hue_chroma(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(hue in [0, 1), value = max, chroma = max - min)` of an RGB batch; ties pick R, then G, as torchvision."""
    maxc = x.amax(1)
    chroma = maxc - x.amin(1)
    r, g, b = x.unbind(1)
    sector = torch.where(r == maxc, (g - b) / chroma.clamp_min(1e-12),
                         torch.where(g == maxc, (b - r) / chroma.clamp_min(1e-12) + 2,
                                     (r - g) / chroma.clamp_min(1e-12) + 4))
    hue = torch.where(chroma > 0, sector / 6 % 1.0, torch.zeros_like(maxc))
    return hue, maxc, chroma


def _from_hue_chroma(hue: torch.Tensor, value: torch.Tensor, chroma: torch.Tensor) -> torch.Tensor:
    """Closed form: channel n in (5, 3, 1) -> (R, G, B) is v - c clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6."""
    n = to_device((5.0, 3.0, 1.0), hue).view(1, 3, 1, 1)  # the three channels in one pass each
    k = (n + 6 * hue.unsqueeze(1)) % 6
    return value.unsqueeze(1) - chroma.unsqueeze(1) * torch.minimum(k, 4 - k).clamp_(0, 1)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    hue, value, chroma = _hue_chroma(x)
    sat = torch.where(value > 0, chroma / value.clamp_min(1e-12), torch.zeros_like(value))
    return torch.stack([hue, sat, value], 1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    h, s, v = x.unbind(1)
    return _from_hue_chroma(h, v, s * v)


def adjust_hue(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Shift H by `f` (mod 1) in HSV; S and V are unchanged, so this works on (hue, value, chroma) directly."""
    hue, value, chroma = _hue_chroma(x)
    return _from_hue_chroma((hue + f.view(-1, 1, 1)) % 1.0, value, chroma).clamp(0, 1)


@dataclass(frozen=True)
class ToFloat:
    """uint8 -> float in [0, 1]; nothing else (DomainBed's MNIST datasets)."""

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        out, single = _to_float_batch(x)
        return out[0] if single else out


@dataclass(frozen=True)
class EvalTransform:
    """Resize to `img_size` (when the stored size differs), scale to [0, 1], normalise."""

    img_size: int
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        out, single = _to_float_batch(x)
        out = normalize(resize(out, self.img_size), self.mean, self.std)
        return out[0] if single else out


@dataclass(frozen=True)
class AugmentDraws:
    """Every random decision of `TrainTransform` for a batch, drawn on the CPU: the crop boxes
    `(top, left, height, width)`, the flips, each image's order of the four colour adjustments and their
    factors `[B, 4]` (brightness, contrast, saturation, hue), and the grayscale choices (None: not RGB)."""

    box: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    flip: torch.Tensor
    order: torch.Tensor
    factors: torch.Tensor
    gray: torch.Tensor | None

    @staticmethod
    def concat(draws: "list[AugmentDraws]") -> "AugmentDraws":
        """The draws of several batches as those of their concatenation (one `apply` for all of them)."""
        grays = [d.gray for d in draws if d.gray is not None]
        top, left, height, width = (torch.cat([d.box[i] for d in draws]) for i in range(4))
        return AugmentDraws((top, left, height, width), torch.cat([d.flip for d in draws]),
                            torch.cat([d.order for d in draws]), torch.cat([d.factors for d in draws]),
                            torch.cat(grays) if len(grays) == len(draws) else None)


@dataclass(frozen=True)
class TrainTransform:
    """DomainBed's training augmentation (see module docstring), batched and generator-driven.

    `draw` takes every random decision for a batch (on the CPU, from the generator) and `apply` carries them
    out on the images wherever they are; calling the transform does both. The loaders draw per domain and
    apply once to all the step's domains: on a GPU, one set of kernel launches instead of one per domain."""

    img_size: int
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    scale: tuple[float, float] = (0.7, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter: tuple[float, float, float, float] = (0.3, 0.3, 0.3, 0.3)  # brightness, contrast, saturation, hue
    grayscale_p: float = 0.1

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        single = x.ndim == 3
        batch = x.unsqueeze(0) if single else x
        out = self.apply(batch, self.draw(batch.shape[0], batch.shape[1], generator))
        return out[0] if single else out

    def draw(self, b: int, channels: int, generator: torch.Generator | None = None) -> AugmentDraws:
        """The random decisions for `b` images of `channels` channels (the crop is drawn on the image resized
        to `img_size`, as `apply` takes it)."""
        g = generator
        box = resized_crop_params(b, self.img_size, self.img_size, self.scale, self.ratio, g)
        flip = torch.rand(b, generator=g) < self.flip_p
        order = torch.rand(b, 4, generator=g).argsort(1)
        u = torch.rand(b, 4, generator=g)
        bri, con, sat, hue = self.jitter
        # torchvision's ranges: [max(0, 1 - f), 1 + f] for brightness/contrast/saturation, [-f, f] for hue
        factors = torch.stack([max(0.0, 1 - bri) + (1 + bri - max(0.0, 1 - bri)) * u[:, 0],
                               max(0.0, 1 - con) + (1 + con - max(0.0, 1 - con)) * u[:, 1],
                               max(0.0, 1 - sat) + (1 + sat - max(0.0, 1 - sat)) * u[:, 2],
                               -hue + 2 * hue * u[:, 3]], 1).float()
        gray = torch.rand(b, generator=g) < self.grayscale_p if channels == 3 else None
        return AugmentDraws(box, flip, order, factors, gray)

    def apply(self, x: torch.Tensor, draws: AugmentDraws) -> torch.Tensor:
        """Augment the batch `x` [B, C, H, W] (uint8 or float in [0, 1], any device) as `draws` decided."""
        out, _ = _to_float_batch(x)
        out = resize(out, self.img_size)
        out = resized_crop(out, *draws.box, self.img_size, flip=draws.flip)
        out = self._jitter(out, draws.order, draws.factors)  # `out` is a fresh tensor: the jitter may write into it
        if draws.gray is not None and bool(draws.gray.any()):
            rows = _rows(draws.gray, out)
            out[rows] = grayscale(out[rows]).expand(-1, 3, -1, -1)
        return normalize(out, self.mean, self.std)

    @staticmethod
    def _jitter(x: torch.Tensor, order: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
        """ColorJitter with one random order of the four adjustments per image (`order` [B, 4], `factors`
        [B, 4]): at each of the four positions, brightness, contrast and saturation (each `f x + (1 - f) t`
        with t = 0, the image's mean luma or its luma: one linear pass over the whole batch with per-image
        coefficients, identity where another adjustment is due) and then hue on the images due for it.
        Every coefficient and choice is worked out on the CPU first, for all positions at once, and the
        coefficients travel in one copy."""
        op = order if x.shape[1] == 3 else torch.where(order < 2, order, -1)  # saturation and hue need RGB
        f = factors.to(x.dtype).gather(1, op.clamp_min(0))  # [B, 4]: the factor due at each position
        coef = torch.stack([torch.where((op >= 0) & (op <= 2), f, torch.ones_like(f)),  # x's scale
                            torch.where(op == 2, 1 - f, torch.zeros_like(f)),  # the luma's (saturation)
                            torch.where(op == 1, 1 - f, torch.zeros_like(f))], 0)  # the mean luma's (contrast)
        coef = to_device(coef.permute(2, 1, 0).unsqueeze(-1).unsqueeze(-1), x)  # [4 positions, B, 3, 1, 1]
        present = torch.stack([op == a for a in range(4)], 0).any(1).T.tolist()  # [position][adjustment]
        for k, (bright, contrast, saturation, hue) in enumerate(present):
            if bright or contrast or saturation:
                x = _linear_adjust(x, coef[k], contrast, saturation)
            if hue:
                due = op[:, k] == 3
                rows = _rows(due, x)
                x[rows] = adjust_hue(x[rows], to_device(f[due, k], x))
        return x


def _linear_adjust(x: torch.Tensor, coef: torch.Tensor, contrast: bool, saturation: bool) -> torch.Tensor:
    """Brightness, contrast or saturation per image, as torchvision's `adjust_*`: `clamp(f x + (1 - f) t)`
    with t = 0, the mean luma or the luma, from `coef` [B, 3, 1, 1] = (scale of x, of the luma, of the mean
    luma) per image; images due for none of them have (1, 0, 0). One kernel per pass."""
    if not (contrast or saturation):
        return (x * coef[:, 0:1]).clamp_(0, 1)
    luma = grayscale(x)
    out = torch.addcmul(luma.mean(dim=(1, 2, 3), keepdim=True) * coef[:, 2:3], x, coef[:, 0:1])
    if saturation:
        out.addcmul_(luma, coef[:, 1:2])
    return out.clamp_(0, 1)


def train_transform(img_size: int, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> TrainTransform:
    return TrainTransform(img_size, tuple(mean), tuple(std))


def eval_transform(img_size: int, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> EvalTransform:
    return EvalTransform(img_size, tuple(mean), tuple(std))
