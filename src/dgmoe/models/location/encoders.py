"""Location encoders phi: metadata -> context vector r = phi(m) (MoGE §2.1, §2.3, §2.2 (ii)).

A small registry of modules that map a metadata dict (`dgmoe.data.geo.metadata`) to [B, out_dim]:

- `sh_siren`: real spherical harmonics of degrees 0..L-1 followed by a SIREN, i.e. a randomly initialised
  SatCLIP location encoder (MoGE §2.3: L = 10, output 256);
- `sh`: the parameter-free spherical harmonics alone (input of the ERM+LE baseline's MLP);
- `location_id`: an embedding of discrete location ids with an explicit unknown slot (iWildCam: the OOD
  cameras never occur in training, reference notes §2.5);
- `pretrained`: a frozen SH+SIREN encoder loaded from a local weights file (SatCLIP checkpoint layout or a
  file written by `save_location_encoder`), the plug-in fallback of §2.2 (ii).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import torch
import torch.nn as nn

from dgmoe.data.geo.metadata import LOCATION_ID, TIME, MetadataError, any_bad, coordinates, location_ids, require_fields
from dgmoe.models.location.siren import SirenNet
from dgmoe.models.location.spherical_harmonics import SphericalHarmonics
from dgmoe.registry import Registry

Meta = Mapping[str, torch.Tensor]
LOCATION_ENCODERS: Registry[Callable[..., nn.Module]] = Registry("location encoder")


def register_location_encoder(name: str):
    return LOCATION_ENCODERS.register(name)


def build_location_encoder(name: str, **kwargs: Any) -> nn.Module:
    """Build a registered location encoder; every encoder has `out_dim` and `forward(meta) -> [B, out_dim]`."""
    return LOCATION_ENCODERS.get(name)(**kwargs)


def list_location_encoders() -> list[str]:
    return LOCATION_ENCODERS.names()


@register_location_encoder("sh")
class SHEncoder(nn.Module):
    """Spherical-harmonic features of (lon, lat): L^2 values, no parameters."""

    def __init__(self, num_degrees: int = 10, satclip_pi_quirk: bool = False):
        super().__init__()
        self.posenc = SphericalHarmonics(num_degrees, satclip_pi_quirk)
        self.out_dim = self.posenc.out_dim

    def forward(self, meta: Meta) -> torch.Tensor:
        lonlat, _ = coordinates(meta, owner="location encoder 'sh'")
        return self.posenc(lonlat)


@register_location_encoder("sh_siren")
class SHSirenEncoder(nn.Module):
    """SatCLIP's location encoder: SIREN(SH_L(lon, lat)) (MoGE §2.3: randomly initialised, L = 10).

    Args:
        num_degrees: L, SatCLIP's `legendre_polys` (degrees 0..L-1, L^2 features).
        hidden, num_layers: SIREN width (SatCLIP `capacity`) and number of sine layers.
        out_dim: D_r, the context width (SatCLIP `embed_dim`, 256).
        w0_initial, w0: sine frequencies of the first and later layers (30, 1).
        dropout: dropout on the sine pre-activations in training. SatCLIP trains with 0.5; dgmoe's default
            is 0 because the encoder drives MoGE's routing, and on GeoMNIST p = 0.5 left the routing
            region-agnostic (docs: MoGE section, ablation "MoGE-drop0.5").
        satclip_pi_quirk: multiply the m = 0 harmonics by pi as SatCLIP's released checkpoints do.
        missing: 'error' (default) raises on NaN coordinates; 'unknown' routes those rows through a learned
            unknown-location vector (out-of-range coordinates always raise).
        time_years: optional (first, last) year: appends meta['time'] (decimal year) as three features,
            sin/cos of the time of year and the year clamped to the range and scaled to [-1, 1], so test
            years outside the training range cannot push the router into extrapolation (reference notes §6).
    """

    def __init__(self, num_degrees: int = 10, hidden: int = 256, num_layers: int = 2, out_dim: int = 256,
                 w0_initial: float = 30.0, w0: float = 1.0, dropout: float = 0.0, satclip_pi_quirk: bool = False,
                 missing: Literal["error", "unknown"] = "error", time_years: tuple[float, float] | None = None):
        super().__init__()
        if missing not in ("error", "unknown"):
            raise ValueError(f"missing must be 'error' or 'unknown', got {missing!r}")
        if time_years is not None and not time_years[0] < time_years[1]:
            raise ValueError(f"time_years must be (first, last) with first < last, got {time_years}")
        self.posenc = SphericalHarmonics(num_degrees, satclip_pi_quirk)
        self.time_years = None if time_years is None else (float(time_years[0]), float(time_years[1]))
        dim_in = self.posenc.out_dim + (3 if time_years is not None else 0)
        self.nnet = SirenNet(dim_in, hidden, out_dim, num_layers, w0, w0_initial, dropout)
        self.out_dim = out_dim
        self.missing = missing
        self.unknown = nn.Parameter(torch.randn(out_dim) * 0.02) if missing == "unknown" else None
        self.config = dict(num_degrees=num_degrees, hidden=hidden, num_layers=num_layers, out_dim=out_dim,
                           w0_initial=w0_initial, w0=w0, dropout=dropout, satclip_pi_quirk=satclip_pi_quirk,
                           time_years=self.time_years)

    def forward(self, meta: Meta) -> torch.Tensor:
        lonlat, missing = coordinates(meta, owner="location encoder 'sh_siren'", allow_missing=self.unknown is not None)
        weight = self.nnet.last_layer.weight
        feats = self.posenc(lonlat)
        if self.time_years is not None:
            feats = torch.cat([feats, self.time_features(meta).to(feats.device)], dim=1)
        r = self.nnet(feats.to(weight.device, weight.dtype))
        if self.unknown is not None:
            r = torch.where(missing.to(r.device).unsqueeze(1), self.unknown.to(r.dtype).expand_as(r), r)
        return r

    def time_features(self, meta: Meta) -> torch.Tensor:
        require_fields(meta, (TIME,), "location encoder 'sh_siren' with time_years")
        t = meta[TIME].reshape(-1).double()
        if any_bad(~torch.isfinite(t), "location encoder 'sh_siren': meta['time'] is NaN/inf"):
            raise MetadataError("location encoder 'sh_siren': meta['time'] has missing (NaN/inf) values")
        assert self.time_years is not None  # only encoders built with time_years read the time
        lo, hi = self.time_years
        phase = 2 * torch.pi * (t - torch.floor(t))
        year = (t.clamp(lo, hi) - lo) / (hi - lo) * 2 - 1
        return torch.stack([torch.sin(phase), torch.cos(phase), year], dim=1).float()


@register_location_encoder("location_id")
class LocationIdEmbedding(nn.Module):
    """Learned embedding of discrete location ids with an explicit unknown slot (row `num_ids`).

    Which ids are "known" is learnt from the data: every id seen in a training-mode forward is marked in the
    `seen` buffer (saved with the model), or given up front with `known_ids`. At any time, ids that are -1 or
    were never seen in training use the unknown row. During training each id is replaced by the unknown slot
    with probability `id_dropout`, so that row is trained for the OOD cameras (reference notes §2.5).
    """

    seen: torch.Tensor  # buffer, registered in __init__

    def __init__(self, num_ids: int, dim: int = 256, id_dropout: float = 0.1, key: str = LOCATION_ID,
                 known_ids: list[int] | None = None):
        super().__init__()
        if num_ids < 1:
            raise ValueError(f"location_id encoder needs num_ids >= 1, got {num_ids}")
        if not 0.0 <= id_dropout < 1.0:
            raise ValueError(f"id_dropout must be in [0, 1), got {id_dropout}")
        self.num_ids, self.out_dim, self.id_dropout, self.key = num_ids, dim, id_dropout, key
        self.unknown_index = num_ids
        self.embedding = nn.Embedding(num_ids + 1, dim)
        self.register_buffer("seen", torch.zeros(num_ids, dtype=torch.bool))
        self.track_seen = known_ids is None
        if known_ids is not None:
            known = torch.as_tensor(known_ids, dtype=torch.long)
            if bool(((known < 0) | (known >= num_ids)).any()):
                raise ValueError(f"known_ids must lie in [0, {num_ids}), got {known.tolist()}")
            self.seen[known] = True

    def rows(self, meta: Meta) -> torch.Tensor:
        """Embedding rows used for each sample (the unknown slot is `num_ids`)."""
        ids = location_ids(meta, self.num_ids, owner="location encoder 'location_id'", key=self.key)
        ids = ids.to(self.seen.device)
        valid = ids >= 0
        if self.training and self.track_seen:
            self.seen[ids[valid]] = True
        known = valid & self.seen[ids.clamp(min=0)]
        if self.training and self.id_dropout > 0:
            known = known & (torch.rand(ids.shape, device=ids.device) >= self.id_dropout)
        return torch.where(known, ids, torch.full_like(ids, self.unknown_index))

    def forward(self, meta: Meta) -> torch.Tensor:
        return self.embedding(self.rows(meta))


class FrozenLocationEncoder(nn.Module):
    """Wraps an encoder, freezes its parameters and keeps it in eval mode (no dropout) for good."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder.eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        self.out_dim = encoder.out_dim

    def train(self, mode: bool = True) -> "FrozenLocationEncoder":
        super().train(mode)
        self.encoder.eval()
        return self

    def forward(self, meta: Meta) -> torch.Tensor:
        with torch.no_grad():
            return self.encoder(meta)


_NNET_PREFIX = re.compile(r"^(.*?)nnet\.(layers\.\d+|last_layer)\.(weight|bias)$")


def _read_state(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"location encoder weights file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            info = json.loads((f.metadata() or {}).get("dgmoe_location_encoder", "{}"))
            return {k: f.get_tensor(k) for k in f.keys()}, info
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(blob, dict):
        raise ValueError(f"{path}: expected a state dict or a Lightning checkpoint, got {type(blob).__name__}")
    hyper = blob.get("hyper_parameters", {}) if isinstance(blob.get("hyper_parameters"), dict) else {}
    state = blob.get("state_dict", blob)
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, hyper


def save_location_encoder(encoder: SHSirenEncoder, path: str | Path) -> None:
    """Write an SH+SIREN encoder as safetensors with its config, readable by `load_pretrained_location_encoder`."""
    from dgmoe.atomic import save_safetensors_atomic

    state = {k: v.detach().contiguous() for k, v in encoder.state_dict().items()}
    save_safetensors_atomic(path, state, metadata={"dgmoe_location_encoder": json.dumps(encoder.config)})


@register_location_encoder("pretrained")
def load_pretrained_location_encoder(path: str | Path, satclip_pi_quirk: bool | None = None,
                                     missing: Literal["error", "unknown"] = "error",
                                     frozen: bool = True) -> nn.Module:
    """A plug-in pretrained SH+SIREN location encoder from a local file (MoGE §2.2 (ii), MoGE-SC).

    Reads a SatCLIP Lightning checkpoint (keys `model.location.nnet.layers.{i}.weight/bias`,
    `...nnet.last_layer.weight/bias`; the SIREN sizes are inferred from the weights; SatCLIP's pi quirk is
    on unless told otherwise) or a safetensors file written by `save_location_encoder`. The result is
    frozen (`frozen=True`), so training the MoGE model leaves the encoder as it was loaded.
    """
    path = Path(path)
    state, info = _read_state(path)
    nnet: dict[str, torch.Tensor] = {}
    prefixes = set()
    for key, value in state.items():
        match = _NNET_PREFIX.match(key)
        if match:
            prefixes.add(match.group(1))
            nnet[f"{match.group(2)}.{match.group(3)}"] = value
    if not nnet:
        raise ValueError(f"{path}: no SIREN weights found (expected keys like 'model.location.nnet.layers.0.weight' "
                         f"or 'nnet.layers.0.weight'); first keys: {sorted(state)[:5]}")
    if len(prefixes) > 1:
        raise ValueError(f"{path}: several SIREN weight sets found under prefixes {sorted(prefixes)}")
    num_layers = len({k.split(".")[1] for k in nnet if k.startswith("layers.")})
    first, last = nnet.get("layers.0.weight"), nnet.get("last_layer.weight")
    if first is None or last is None:
        raise ValueError(f"{path}: SIREN weights lack layers.0 or last_layer (found {sorted(nnet)})")
    time_years = info.get("time_years")
    n_sh = first.shape[1] - (3 if time_years else 0)
    num_degrees = int(round(n_sh**0.5))
    if num_degrees**2 != n_sh:
        raise ValueError(f"{path}: first SIREN layer takes {first.shape[1]} inputs, not a square L^2 of SH features")
    is_satclip = prefixes.pop().endswith("location.")
    quirk = satclip_pi_quirk if satclip_pi_quirk is not None else bool(info.get("satclip_pi_quirk", is_satclip))
    encoder = SHSirenEncoder(num_degrees=num_degrees, hidden=first.shape[0], num_layers=num_layers,
                             out_dim=last.shape[0], w0_initial=float(info.get("w0_initial", 30.0)),
                             w0=float(info.get("w0", 1.0)), dropout=float(info.get("dropout", 0.5)),
                             satclip_pi_quirk=quirk, missing=missing,
                             time_years=tuple(time_years) if time_years else None)
    encoder.nnet.load_state_dict(nnet, strict=True)
    if missing == "unknown" and "unknown" in state:
        assert encoder.unknown is not None  # built with missing="unknown"
        encoder.unknown.data.copy_(state["unknown"])
    return FrozenLocationEncoder(encoder) if frozen else encoder
