"""Real spherical harmonics of degrees 0..L-1 as a location feature map (SatCLIP's positional encoding).

For a point (lon, lat) in degrees, SatCLIP's angle convention is

    theta = deg2rad(lat + 90)  in [0, pi],     phi = deg2rad(lon + 180)  in [0, 2 pi],

so cos(theta) = -sin(lat) (a north/south reflection of the usual colatitude; kept for checkpoint
compatibility). The L^2 features are ordered l = 0..L-1, m = -l..l (index l^2 + l + m):

    Y_l^0  = c0 * Pbar_l^0(cos theta)
    Y_l^m  = sqrt(2) * Pbar_l^m(cos theta) * cos(m phi)      m > 0
    Y_l^-m = sqrt(2) * Pbar_l^m(cos theta) * sin(m phi)      m > 0

with the fully normalised associated Legendre functions Pbar_l^m = N_l^m P_l^m, N_l^m =
sqrt((2l+1)/(4 pi) (l-m)!/(l+m)!), *without* the Condon-Shortley phase. c0 = 1 gives an orthonormal basis on
the sphere; `satclip_pi_quirk=True` gives c0 = pi, the normalisation bug of SatCLIP's generated "analytic"
harmonics that its released checkpoints depend on (reference notes §1.2).

Pbar is computed with the stable three-term recursion on fully normalised values (no factorials, no
(1 - x^2)^(m/2) powers), vectorised over m for each degree, in float64:

    Pbar_0^0 = 1/sqrt(4 pi),    Pbar_m^m = Pbar_{m-1}^{m-1} sqrt((2m+1)/(2m)) sin(theta),
    Pbar_{m+1}^m = sqrt(2m+3) x Pbar_m^m,
    Pbar_l^m = a_lm x Pbar_{l-1}^m - b_lm Pbar_{l-2}^m,
    a_lm = sqrt((4l^2-1)/(l^2-m^2)),  b_lm = sqrt((2l+1)((l-1)^2-m^2) / ((2l-3)(l^2-m^2))).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn


def satclip_angles(lon: torch.Tensor, lat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(theta, phi) in radians from degrees, SatCLIP's convention (theta = lat + 90, phi = lon + 180)."""
    return torch.deg2rad(lat.double() + 90.0), torch.deg2rad(lon.double() + 180.0)


@functools.lru_cache(maxsize=None)
def _recursion_coefficients(num_degrees: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a_lm and b_lm as [L, L] float64 tables (zero where unused); built once per L and never modified (the
    copies to a device read them asynchronously)."""
    a = torch.zeros(num_degrees, num_degrees, dtype=torch.float64)
    b = torch.zeros(num_degrees, num_degrees, dtype=torch.float64)
    for l in range(2, num_degrees):
        for m in range(0, l - 1):
            a[l, m] = math.sqrt((4 * l * l - 1) / (l * l - m * m))
            b[l, m] = math.sqrt((2 * l + 1) * ((l - 1) ** 2 - m * m) / ((2 * l - 3) * (l * l - m * m)))
    return a, b


def normalized_legendre(x: torch.Tensor, num_degrees: int) -> list[torch.Tensor]:
    """Pbar_l^m(x) for l < num_degrees: a list whose entry l is a [..., l+1] tensor over m = 0..l."""
    a, b = _recursion_coefficients(num_degrees)
    a, b = a.to(x.device, non_blocking=True), b.to(x.device, non_blocking=True)  # no host sync on a GPU
    s = torch.sqrt(torch.clamp(1.0 - x * x, min=0.0))
    rows: list[torch.Tensor] = [torch.full_like(x, 1.0 / math.sqrt(4.0 * math.pi)).unsqueeze(-1)]
    for l in range(1, num_degrees):
        prev = rows[l - 1]
        diag = prev[..., l - 1] * math.sqrt((2 * l + 1) / (2 * l)) * s
        sub = math.sqrt(2 * l + 1) * x * prev[..., l - 1]
        if l >= 2:
            m = slice(0, l - 1)
            body = a[l, m] * x.unsqueeze(-1) * prev[..., m] - b[l, m] * rows[l - 2][..., m]
            rows.append(torch.cat([body, sub.unsqueeze(-1), diag.unsqueeze(-1)], dim=-1))
        else:
            rows.append(torch.stack([sub, diag], dim=-1))
    return rows


def real_spherical_harmonics(theta: torch.Tensor, phi: torch.Tensor, num_degrees: int,
                             satclip_pi_quirk: bool = False) -> torch.Tensor:
    """Real SH features [..., L^2] (float64) at polar angle theta and azimuth phi (radians)."""
    if num_degrees < 1:
        raise ValueError(f"num_degrees (SatCLIP's legendre_polys) must be >= 1, got {num_degrees}")
    theta, phi = theta.double(), phi.double()
    pbar = normalized_legendre(torch.cos(theta), num_degrees)
    c0 = math.pi if satclip_pi_quirk else 1.0
    feats = []
    for l in range(num_degrees):
        if l == 0:
            feats.append(c0 * pbar[0])
            continue
        m = torch.arange(1, l + 1, dtype=torch.float64, device=theta.device)
        mphi = phi.unsqueeze(-1) * m
        positive = math.sqrt(2.0) * pbar[l][..., 1:]
        feats.append((positive * torch.sin(mphi)).flip(-1))  # m = -l .. -1
        feats.append(c0 * pbar[l][..., :1])
        feats.append(positive * torch.cos(mphi))  # m = 1 .. l
    return torch.cat(feats, dim=-1)


class SphericalHarmonics(nn.Module):
    """Parameter-free location features: (lon, lat) degrees [B, 2] -> L^2 real SH features [B, L^2].

    The output dtype is float32 unless `dtype` says otherwise; the recursion always runs in float64.
    """

    def __init__(self, num_degrees: int = 10, satclip_pi_quirk: bool = False, dtype: torch.dtype = torch.float32):
        super().__init__()
        if num_degrees < 1:
            raise ValueError(f"num_degrees must be >= 1, got {num_degrees}")
        self.num_degrees = num_degrees
        self.satclip_pi_quirk = satclip_pi_quirk
        self.out_dtype = dtype
        self.out_dim = num_degrees**2

    def forward(self, lonlat: torch.Tensor) -> torch.Tensor:
        if lonlat.ndim != 2 or lonlat.shape[1] != 2:
            raise ValueError(f"SphericalHarmonics expects (lon, lat) pairs of shape [B, 2], got {tuple(lonlat.shape)}")
        theta, phi = satclip_angles(lonlat[:, 0], lonlat[:, 1])
        return real_spherical_harmonics(theta, phi, self.num_degrees, self.satclip_pi_quirk).to(self.out_dtype)

    def extra_repr(self) -> str:
        return f"num_degrees={self.num_degrees}, features={self.out_dim}, satclip_pi_quirk={self.satclip_pi_quirk}"
