"""iWildCam2020-WILDS (Beery et al., 2021; Koh et al., ICML 2021) from its WILDS v2.0 file layout.

`<root>/metadata.csv` (columns split, location_remapped, y, datetime, filename, ...), `<root>/categories.csv`
(y, category_id, name; y = 99999 for the categories outside the 182 classes) and `<root>/train/<filename>`
(reference notes §2.5, `wilds/datasets/iwildcam_dataset.py`):

- y = `y` (182 classes, WILDS' n_classes = max(y) + 1 on the full data), named from `categories.csv`;
- location_id = `location_remapped` (0..322, contiguous camera ids); time = decimal year of `datetime`;
  hour = its hour;
- the WILDS splits train / id_val / id_test (training cameras, split by date) and the OOD val / test,
  whose cameras never appear in training: a learned location-id embedding is untrained for them
  (`dgmoe.models.location.encoders.LocationIdEmbedding` routes them through its unknown slot).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dgmoe.data.wilds import tables

IWILDCAM_DIR = "iwildcam_v2.0"
IWILDCAM_DOMAINS = ("train", "id_val", "id_test", "val", "test")
IWILDCAM_NUM_CLASSES = 182
#: the y of `categories.csv` rows for iWildCam categories that are not among WILDS' classes
IWILDCAM_UNUSED_Y = 99999
META = {"location_id": np.int64, "time": np.float32, "hour": np.int64}


def read_iwildcam(root: Path) -> pd.DataFrame:
    """The checked metadata: split, y, location_id, time, hour, filename (one row per image)."""
    csv = root / "metadata.csv"
    df = tables.read_table(csv, ("split", "location_remapped", "y", "datetime", "filename"))
    tables.choices(csv, df, "split", IWILDCAM_DOMAINS)
    y = tables.integers(csv, df, "y", 0, IWILDCAM_NUM_CLASSES)
    location = tables.integers(csv, df, "location_remapped", 0)
    tables.fail(csv, df, "filename", df["filename"].isna().to_numpy(), "is not a file name")
    stamps = tables.times(csv, df, "datetime")
    return pd.DataFrame({"split": df["split"].to_numpy(), "y": y, "location_id": location,
                         "time": tables.decimal_year(stamps), "hour": stamps.dt.hour.to_numpy(dtype=np.int64),
                         "filename": df["filename"].astype(str).to_numpy()})


def iwildcam_classes(root: Path) -> tuple[str, ...]:
    """Class names from `categories.csv` (columns y, category_id, name); classes it does not name keep their
    number. The published file lists every iWildCam 2021 category: those outside WILDS' 182 classes have
    y = 99999 (`IWILDCAM_UNUSED_Y`) and name no class."""
    csv = root / "categories.csv"
    cats = tables.read_table(csv, ("y", "name"))
    cats = cats[pd.to_numeric(cats["y"], errors="coerce") != IWILDCAM_UNUSED_Y]
    ids = tables.integers(csv, cats, "y", 0, IWILDCAM_NUM_CLASSES)
    names = {int(i): str(n) for i, n in zip(ids, cats["name"])}
    return tuple(names.get(i, str(i)) for i in range(IWILDCAM_NUM_CLASSES))


def iwildcam_parts(df: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    return [(s, df["split"] == s) for s in IWILDCAM_DOMAINS]


def image_paths(root: Path):
    def paths(sub: pd.DataFrame) -> list[Path]:
        return [root / "train" / f for f in sub["filename"]]
    return paths
