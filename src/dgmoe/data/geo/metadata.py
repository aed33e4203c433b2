"""Named metadata fields and their validation.

Datasets return metadata as a dict of tensors with these field names (see `dgmoe.data.base`):

    lat, lon       float degrees, lat in [-90, 90], lon in [-180, 180]; NaN marks a missing coordinate
    location_id    long, a discrete place (camera trap, site); -1 marks an unknown place
    region         long, an index into the dataset's region names (used for grouping and evaluation only)
    time           float, decimal year (e.g. 2014.37)

Bad metadata never turns into a silent NaN: the checks below raise with the field, the row and the value.
"""
from __future__ import annotations

from typing import Mapping

import torch

from dgmoe.errors import UsageError

LAT, LON, LOCATION_ID, REGION, TIME = "lat", "lon", "location_id", "region", "time"


class MetadataError(UsageError):
    """Missing, malformed or out-of-range metadata."""


def require_fields(meta: Mapping[str, torch.Tensor] | None, fields: tuple[str, ...],
                   owner: str) -> Mapping[str, torch.Tensor]:
    """`meta`, checked to hold `fields` (raises MetadataError otherwise)."""
    if meta is None:
        raise MetadataError(
            f"{owner} routes on metadata fields {list(fields)} but got meta=None; use a dataset that returns "
            "(image, label, meta) or, for MoGE, the shared-expert-only mode (set_routing_mode('shared_only'))")
    missing = [f for f in fields if f not in meta]
    if missing:
        raise MetadataError(f"{owner} needs metadata fields {list(fields)}; missing {missing}, got {sorted(meta)}")
    return meta


def any_bad(bad: torch.Tensor, what: str) -> bool:
    """Whether any row is flagged. On a CPU the caller then raises its full message. On an accelerator
    reading the answer would wait for the device (a host synchronisation every step), so the check is a
    device-side assertion instead (`torch._assert_async`): the run still fails, naming the check, at the
    next synchronisation (the same batch on the CPU names the row and the value)."""
    if bad.device.type == "cpu":
        return bool(bad.any())
    torch._assert_async(~bad.any(), f"metadata check failed: {what}")
    return False


def _first_bad(mask: torch.Tensor, values: torch.Tensor) -> str:
    row = int(mask.nonzero()[0, 0])
    return f"{int(mask.sum())} of {mask.numel()} rows (first: row {row}, value {float(values[row])!r})"


def coordinates(meta: Mapping[str, torch.Tensor] | None, owner: str,
                allow_missing: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated (lon, lat) pairs [B, 2] (float64) and a [B] bool mask of rows with a missing coordinate.

    Missing (NaN/inf) coordinates raise unless `allow_missing`; out-of-range ones always raise. Missing rows
    are returned as (0, 0) and flagged in the mask, so the caller substitutes its explicit unknown path.
    """
    meta = require_fields(meta, (LAT, LON), owner)
    lat, lon = meta[LAT].reshape(-1).double(), meta[LON].reshape(-1).double()
    if lat.shape != lon.shape:
        raise MetadataError(f"{owner}: meta['lat'] has {lat.numel()} values but meta['lon'] has {lon.numel()}")
    missing = ~(torch.isfinite(lat) & torch.isfinite(lon))
    if not allow_missing and any_bad(missing, f"{owner}: meta['lat'] or meta['lon'] is NaN/inf"):
        bad_field = LAT if bool((~torch.isfinite(lat)).any()) else LON
        values = lat if bad_field == LAT else lon
        raise MetadataError(
            f"{owner}: meta[{bad_field!r}] is missing (NaN/inf) in {_first_bad(~torch.isfinite(values), values)}; "
            "fix the data or build the location encoder with missing='unknown' to route such rows through its "
            "learned unknown-location embedding")
    lat = torch.where(missing, torch.zeros_like(lat), lat)
    lon = torch.where(missing, torch.zeros_like(lon), lon)
    for name, values, bound in ((LAT, lat, 90.0), (LON, lon, 180.0)):
        out = values.abs() > bound
        if any_bad(out, f"{owner}: meta[{name!r}] outside [-{bound:g}, {bound:g}]"):
            hint = " (wrap longitudes with ((lon + 180) % 360) - 180)" if name == LON else ""
            raise MetadataError(
                f"{owner}: meta[{name!r}] must be degrees in [-{bound:g}, {bound:g}]; out of range in "
                f"{_first_bad(out, values)}{hint}")
    return torch.stack([lon, lat], dim=1), missing


def location_ids(meta: Mapping[str, torch.Tensor] | None, num_ids: int, owner: str,
                 key: str = LOCATION_ID) -> torch.Tensor:
    """Validated location ids [B] (long); -1 marks an explicitly unknown place."""
    meta = require_fields(meta, (key,), owner)
    ids = meta[key].reshape(-1)
    if ids.is_floating_point():
        if any_bad(~torch.isfinite(ids) | (ids != ids.round()), f"{owner}: meta[{key!r}] holds non-integer ids"):
            raise MetadataError(f"{owner}: meta[{key!r}] must hold integer ids (use -1 for unknown), got {ids.dtype} "
                                "with non-integer values")
    ids = ids.long()
    bad = (ids < -1) | (ids >= num_ids)
    if any_bad(bad, f"{owner}: meta[{key!r}] outside [-1, {num_ids})"):
        raise MetadataError(f"{owner}: meta[{key!r}] must be in [0, {num_ids}) or -1 for unknown; out of range in "
                            f"{_first_bad(bad, ids)}")
    return ids
