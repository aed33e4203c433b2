"""The GeoLifeCLEF 2023 Sentinel-2 sample: real RGB patches with real coordinates (a real-coordinate smoke test).

Layout `<root>/occurrences.csv` (columns patchID, lon, lat, date, year, speciesId) and
`<root>/rgb/<id[-2:]>/<id[-4:-2]>/<id>.jpeg`. speciesId is far too sparse to be a label, so both the label
and the domains are derived from the coordinates (declared here, nothing else is synthetic):

- label = latitude band: 'south' (lat < 47), 'middle' (47 <= lat < 53), 'north' (lat >= 53);
- domain = longitude sector: 'west' (lon < 5), 'central' (5 <= lon < 15), 'east' (lon >= 15);
- meta = {lat, lon, time (decimal year of `date`), region (= the latitude band)}.

Because the label is a function of the coordinates, any model that reads them can reach 100%: the run
checks that real coordinates flow through encoders, routing, training and analysis, it is not evidence
that MoGE helps. Images are decoded eagerly (100 patches).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.base import MultiDomainDataset
from dgmoe.data.catalogue import DatasetSpec, register_dataset
from dgmoe.data.errors import DataDirNotFoundError, LayoutError
from dgmoe.data.geo.images import read_image
from dgmoe.data.wilds.tables import decimal_year
from dgmoe.hparams import SMALL_IMAGES

SAMPLE_DIR = "geolifeclef2023-sample"
LAT_BANDS = ("south", "middle", "north")
LAT_EDGES = (47.0, 53.0)
LON_SECTORS = ("west", "central", "east")
LON_EDGES = (5.0, 15.0)


def patch_path(root: Path, patch_id: int) -> Path:
    s = str(int(patch_id))
    return root / "rgb" / s[-2:] / s[-4:-2] / f"{s}.jpeg"


def sentinel_root(data_dir: str | Path | None) -> Path:
    if data_dir is None:
        raise DataDirNotFoundError(f"Sentinel2Sample needs --data-dir: the folder holding {SAMPLE_DIR}/")
    data_dir = Path(data_dir)
    root = data_dir if (data_dir / "occurrences.csv").is_file() else data_dir / SAMPLE_DIR
    if not (root / "occurrences.csv").is_file():
        raise DataDirNotFoundError(f"no {SAMPLE_DIR}/occurrences.csv under {data_dir}")
    return root


def sentinel_environments(data_dir, img_size: int | None = None, n_per_domain: int | None = None,
                          seed: int = 0) -> tuple[list[ArrayDomain], str]:
    root = sentinel_root(data_dir)
    df = pd.read_csv(root / "occurrences.csv")
    missing = [c for c in ("patchID", "lon", "lat", "date") if c not in df.columns]
    if missing:
        raise LayoutError(f"{root / 'occurrences.csv'} lacks columns {missing}")
    lat, lon = df["lat"].to_numpy(np.float64), df["lon"].to_numpy(np.float64)
    bad = ~np.isfinite(lat) | ~np.isfinite(lon) | (np.abs(lat) > 90) | (np.abs(lon) > 180)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise LayoutError(f"{root / 'occurrences.csv'}: row {row} has invalid coordinates lat={lat[row]}, "
                          f"lon={lon[row]} ({int(bad.sum())} bad rows)")
    band = np.searchsorted(LAT_EDGES, lat, side="right")
    sector = np.searchsorted(LON_EDGES, lon, side="right")
    time = decimal_year(df["date"])
    size = img_size or 128
    images = np.stack([read_image(patch_path(root, p), size).numpy() for p in df["patchID"]])
    envs = []
    for s in range(len(LON_SECTORS)):
        idx = np.flatnonzero(sector == s)[:n_per_domain]
        meta = {"lat": lat[idx].astype(np.float32), "lon": lon[idx].astype(np.float32),
                "time": time[idx].astype(np.float32), "region": band[idx].astype(np.int64)}
        envs.append(ArrayDomain(images[idx], band[idx], meta))
    return envs, f"Sentinel-2 sample {root} ({len(df)} patches)"


def get_sentinel_sample(data_dir, img_size: int | None = 64) -> MultiDomainDataset:
    envs, _ = sentinel_environments(data_dir, img_size)
    size = img_size or 128
    return MultiDomainDataset(name="Sentinel2Sample", domains=list(LON_SECTORS), classes=list(LAT_BANDS),
                              environments=envs, input_shape=(3, size, size), n_steps=301, checkpoint_freq=50,
                              metadata_fields=("lat", "lon", "time", "region"))


SENTINEL_SPEC = register_dataset(DatasetSpec(
    "Sentinel2Sample", "geo-sample", LON_SECTORS, len(LAT_BANDS), None, n_steps=301, checkpoint_freq=50,
    native_size=128, channels=3, augment=False, builder=sentinel_environments,
    reference="GeoLifeCLEF 2023 Sentinel-2 RGB sample; labels/domains from coordinates (dgmoe.data.geo.sentinel)",
    hparams=SMALL_IMAGES))
