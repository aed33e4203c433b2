"""Tiny WILDS datasets in their real file layouts (FMoW v1.1, iWildCam v2.0, Camelyon17 v1.0), written by
the tests: a few 8 x 8 PNGs and the metadata tables with WILDS' columns. Nothing is downloaded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

REGION_COUNTRY = {"Asia": "CHN", "Europe": "FRA", "Africa": "KEN", "Americas": "USA", "Oceania": "AUS",
                  "Other": "XXX"}
COUNTRY_CODES = [("CHN", "Asia"), ("JPN", "Asia"), ("FRA", "Europe"), ("KEN", "Africa"), ("USA", "Americas"),
                 ("AUS", "Oceania")]
CATEGORIES = ("airport", "dam", "park", "zoo")


def _png(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(value)
    Image.fromarray(rng.randint(0, 256, (8, 8, 3)).astype(np.uint8)).save(path)


def fmow_rows() -> list[tuple]:
    """(split, category, country_code, timestamp, lat, lon) rows: 5 train images per named region, every
    WILDS evaluation split with Asian, non-Asian and 'Other' images, one 'seq' row, one unused OOD-year row."""
    rows = []
    for k, region in enumerate(("Asia", "Europe", "Africa", "Americas", "Oceania")):
        for j in range(5):
            rows.append(("train", CATEGORIES[j % 4], REGION_COUNTRY[region], f"20{5 + j:02d}-0{k + 1}-10T10:00:00Z",
                         10.0 * k, 20.0 * j))
    rows.append(("seq", "zoo", "FRA", "2010-01-01T00:00:00Z", 1.0, 1.0))
    rows.append(("train", "zoo", "FRA", "2014-01-01T00:00:00Z", 48.0, 2.0))  # OOD year: in no WILDS split
    for split, year in (("val", 2011), ("test", 2012), ("val", 2014), ("test", 2016)):
        for j, region in enumerate(("Asia", "Europe", "Americas", "Other")):
            rows.append((split, CATEGORIES[j], REGION_COUNTRY[region], f"{year}-06-0{j + 1}T12:00:00Z", 5.0, -j))
    return rows


def write_fmow(data_dir: Path, rows: list[tuple] | None = None) -> Path:
    root = data_dir / "fmow_v1.1"
    root.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows or fmow_rows(), columns=["split", "category", "country_code", "timestamp", "lat", "lon"])
    df.insert(1, "img_filename", [f"f{i}.jpg" for i in range(len(df))])
    df.to_csv(root / "rgb_metadata.csv", index=False)
    pd.DataFrame(COUNTRY_CODES, columns=["alpha-3", "region"]).assign(name="x").to_csv(
        root / "country_code_mapping.csv", index=False)
    for i in range(len(df)):
        _png(root / "images" / f"rgb_img_{i}.png", i)
    return root


def iwildcam_rows() -> list[tuple]:
    """(split, location_remapped, y, datetime, filename): training cameras 0-2, OOD cameras 5-8."""
    rows = []
    for j in range(6):
        rows.append(("train", j % 3, [0, 3, 7][j % 3], f"2013-05-0{j + 1} 0{j}:30:00.000", f"t{j}.jpg"))
    for split, cams in (("id_val", (0, 1)), ("id_test", (1, 2)), ("val", (5, 6)), ("test", (7, 8))):
        for j, cam in enumerate(cams * 2):
            rows.append((split, cam, [0, 3, 7, 3][j], f"2014-01-0{j + 1} 12:00:00.000", f"{split}{j}.jpg"))
    return rows


def write_iwildcam(data_dir: Path, rows: list[tuple] | None = None) -> Path:
    root = data_dir / "iwildcam_v2.0"
    root.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows or iwildcam_rows(), columns=["split", "location_remapped", "y", "datetime", "filename"])
    df.insert(2, "location", range(100, 100 + len(df)))  # the original camera ids (dgmoe reads the remapped ones)
    df.to_csv(root / "metadata.csv", index=False)
    # the published layout: every iWildCam 2021 category, y = 99999 for those outside WILDS' classes
    pd.DataFrame({"y": [0, 3, 7, 99999, 99999], "category_id": [0, 10, 20, 30, 31],
                  "name": ["empty", "deer", "fox", "unused_a", "unused_b"]}).to_csv(
        root / "categories.csv", index=False)
    for i, f in enumerate(df["filename"]):
        _png(root / "train" / f, i)
    return root


def camelyon_rows() -> list[tuple]:
    """(patient, node, x_coord, y_coord, tumor, slide, center, split): 4 patches per hospital, 2 slides each."""
    rows = []
    for h in range(5):
        for j in range(4):
            rows.append((f"{h:03d}", j % 2, 100 + j, 200 + h, j % 2, 2 * h + j % 2, h, int(j == 3)))
    return rows


def write_camelyon(data_dir: Path, rows: list[tuple] | None = None) -> Path:
    root = data_dir / "camelyon17_v1.0"
    root.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows or camelyon_rows(),
                      columns=["patient", "node", "x_coord", "y_coord", "tumor", "slide", "center", "split"])
    df.to_csv(root / "metadata.csv")  # with WILDS' unnamed index column
    for i, r in enumerate(df.itertuples(index=False)):
        name = f"patient_{r.patient}_node_{r.node}"
        _png(root / "patches" / name / f"patch_{name}_x_{r.x_coord}_y_{r.y_coord}.png", i)
    return root
