"""GeoMNIST generation (coordinates, concept and covariate shift, splits) and the Sentinel-2 sample loader."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from md_tables import table_rows
from PIL import Image

from dgmoe.data.geo.geomnist import (
    CONCEPTS,
    GEO_REGIONS,
    REGION_NAMES,
    concept_labels,
    geo_domains,
    get_geo_benchmark,
    sample_around,
    tint,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _angle(lat1, lon1, lat2, lon2):
    la1, lo1, la2, lo2 = map(np.radians, (lat1, lon1, lat2, lon2))
    c = np.sin(la1) * np.sin(la2) + np.cos(la1) * np.cos(la2) * np.cos(lo1 - lo2)
    return np.degrees(np.arccos(np.clip(c, -1, 1)))


@pytest.mark.parametrize("lat,lon", [(45.0, -100.0), (85.0, 170.0), (-20.0, 179.0)])
def test_sample_around_is_gaussian_on_the_sphere(lat, lon):
    pts = sample_around(lat, lon, 8.0, 20000, np.random.RandomState(0))
    assert np.all(np.abs(pts[:, 0]) <= 90) and np.all(np.abs(pts[:, 1]) <= 180)
    d = _angle(lat, lon, pts[:, 0], pts[:, 1])
    assert d.mean() == pytest.approx(8.0 * math.sqrt(math.pi / 2), rel=0.03)  # Rayleigh mean
    assert np.median(d) == pytest.approx(8.0 * math.sqrt(2 * math.log(2)), rel=0.03)


def test_concepts_and_palettes():
    digits = np.arange(10)
    assert concept_labels(digits, "A").tolist() == [1, 0, 2, 3, 4, 5, 6, 7, 8, 9]
    assert concept_labels(digits, "B").tolist() == list(range(10))
    assert concept_labels(digits, "C").tolist() == [0, 1, 3, 2, 4, 5, 6, 7, 8, 9]
    for palette in range(3):  # each palette is shared by regions of different concepts
        concepts = {r.concept for r in GEO_REGIONS if r.palette == palette}
        assert len(concepts) == 2
    assert set(CONCEPTS) == {r.concept for r in GEO_REGIONS}
    grey = np.full((2, 4, 4), 200, dtype=np.uint8)
    rgb = tint(grey, 0, np.random.RandomState(0))
    # palette 0 = hues [0, 1/3): red..green, no blue; full value keeps the stroke intensity in one channel
    assert rgb.shape == (2, 3, 4, 4) and rgb[:, 2].max() == 0 and (rgb.max(axis=1) == 200).all()


def test_geo_benchmark_domains_and_metadata():
    ds = get_geo_benchmark(n_per_domain=40)
    domains, test_envs = geo_domains()
    assert ds.domains == domains and "CentralAmerica" not in domains[: test_envs[0]]
    assert [ds.domains[i] for i in test_envs] == [f"{r}/test" for r in REGION_NAMES]
    assert ds.num_classes == 10 and ds.input_shape == (3, 28, 28)
    for name, env in zip(ds.domains, ds.environments):
        region = name.split("/")[0]
        r = GEO_REGIONS[REGION_NAMES.index(region)]
        assert bool((env.meta["region"] == REGION_NAMES.index(region)).all())
        assert _angle(r.lat, r.lon, env.meta["lat"].numpy(), env.meta["lon"].numpy()).max() < 45
        x, y, meta = env[0]
        assert x.dtype == torch.uint8 and set(meta) == {"lat", "lon", "region"}
    again = get_geo_benchmark(n_per_domain=40)
    assert torch.equal(again.environments[3].meta["lat"], ds.environments[3].meta["lat"])
    other = get_geo_benchmark(n_per_domain=40, seed=1)
    assert not torch.equal(other.environments[3].meta["lat"], ds.environments[3].meta["lat"])
    with pytest.raises(ValueError, match="unknown held-out regions"):
        geo_domains(("Atlantis",))


def test_geo_benchmark_in_catalogue():
    from dgmoe.data import get_dataset

    ds = get_dataset("GeoMNIST", None, n_per_domain=10)
    assert len(ds.domains) == 11 and ds.environments[0].meta is not None


def _write_sentinel(root: Path, rows):
    root.mkdir(parents=True)
    pd.DataFrame(rows, columns=["patchID", "lon", "lat", "date", "year", "speciesId"]).to_csv(
        root / "occurrences.csv", index=False)
    for pid, *_ in rows:
        s = str(pid)
        folder = root / "rgb" / s[-2:] / s[-4:-2]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((16, 16, 3), pid % 255, dtype=np.uint8)).save(folder / f"{s}.jpeg")


def test_sentinel_loader_on_fixture(tmp_path):
    from dgmoe.data.geo.sentinel import get_sentinel_sample

    rows = [(5217083, -3.0, 40.0, "2019-06-01", 2019, 1), (4032075, 10.0, 50.0, "2020-01-01", 2020, 2),
            (5189456, 20.0, 60.0, "2021-03-01", 2021, 3), (1234567, 12.0, 46.0, "2018-07-01", 2018, 4)]
    _write_sentinel(tmp_path / "geolifeclef2023-sample", rows)
    ds = get_sentinel_sample(tmp_path, img_size=8)
    assert [len(e) for e in ds.environments] == [1, 2, 1]
    x, y, meta = ds.environments[1][0]
    assert x.shape == (3, 8, 8) and y == 1 and float(meta["lat"]) == 50.0  # central sector, middle band
    assert float(meta["time"]) == pytest.approx(2020.0)
    bad = list(rows)
    bad[1] = (4032075, 10.0, 95.0, "2020-01-01", 2020, 2)
    _write_sentinel(tmp_path / "bad", bad)
    with pytest.raises(ValueError, match="row 1 has invalid coordinates lat=95"):
        get_sentinel_sample(tmp_path / "bad", img_size=8)


@pytest.mark.skipif(not (SHARED / "geolifeclef2023-sample").is_dir(),
                    reason="../shared/data/geolifeclef2023-sample absent")
def test_sentinel_real_sample():
    from dgmoe.data.geo.sentinel import get_sentinel_sample

    ds = get_sentinel_sample(SHARED, img_size=16)
    assert sum(len(e) for e in ds.environments) == 100
    lat = torch.cat([e.meta["lat"] for e in ds.environments])
    assert 35 <= float(lat.min()) and float(lat.max()) <= 68


def test_experiment_selection_and_table():
    from dgmoe.experiments.geo import nearest_training_region, results_table, select_record, test_accuracies

    records = [{"step": 0, "env0_out_acc": 0.5, "env1_out_acc": 0.2, "env2_in_acc": 0.1, "env2_out_acc": 0.3},
               {"step": 1, "env0_out_acc": 0.4, "env1_out_acc": 0.4, "env2_in_acc": 0.6, "env2_out_acc": 0.0},
               {"step": 2, "env0_out_acc": 0.9, "env1_out_acc": 0.4, "env2_in_acc": 0.2, "env2_out_acc": 0.2}]
    assert select_record(records, [0, 1])["step"] == 1  # best worst-region validation, earliest on ties
    assert select_record(records, [0, 1], "last")["step"] == 2
    acc = test_accuracies(records[1], [0, 0, 3], [0, 0, 1], [2])
    assert acc[2] == (pytest.approx(0.45), 4)
    assert nearest_training_region("CentralAmerica", ["NorthAmerica", "SouthAmerica", "Europe"]) == "NorthAmerica"
    rows = [{"method": "A", "worst_region_acc": 0.5, "overall_acc": 0.6, "held_out_acc": 0.4,
             "seen_worst_region_acc": 0.5},
            {"method": "A", "worst_region_acc": 0.7, "overall_acc": 0.8, "held_out_acc": 0.6,
             "seen_worst_region_acc": 0.7}]
    table = results_table(rows).markdown()
    assert ["A", "60.0 ± 14.1", "70.0 ± 14.1", "50.0 ± 14.1", "60.0 ± 14.1", "2"] in table_rows(table)
