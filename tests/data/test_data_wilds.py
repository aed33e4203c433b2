"""The WILDS datasets on tiny fixtures in their real file layouts (`tests/helpers/wilds_fixtures.py`): domains,
items, metadata, WILDS splits, group metrics, and one-line errors that name the file, row and column."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from wilds_fixtures import camelyon_rows, fmow_rows, iwildcam_rows, write_camelyon, write_fmow, write_iwildcam

from dgmoe.data import get_dataset
from dgmoe.data.errors import DataDirNotFoundError, MetadataFileError, TestEnvError
from dgmoe.data.splits import check_test_envs
from dgmoe.data.wilds.fmow import FMOW_REGIONS, read_fmow
from dgmoe.metrics import GroupEvaluation


def test_fmow_metadata_regions_splits_and_coordinates(tmp_path):
    root = write_fmow(tmp_path)
    df = read_fmow(root).set_index("file_index")
    assert 25 not in df.index  # the 'seq' row is dropped; file indices keep the CSV row numbers
    assert pd.isna(df.loc[26, "wilds_split"])  # an original-train image from 2014: in no WILDS split
    assert df.loc[0, "region_name"] == "Asia" and df.loc[30, "region_name"] == "Other"  # XXX: unknown code
    assert [df.loc[i, "wilds_split"] for i in (0, 27, 31, 35, 39)] == ["train", "id_val", "id_test", "val", "test"]
    assert df.loc[1, "lon"] == pytest.approx(20.0) and df.loc[0, "y"] == 0 and df.loc[3, "y"] == 61
    assert df.loc[0, "time"] == pytest.approx(2005 + 9 / 365 + 10 / (24 * 365))


def test_fmow_layouts(tmp_path):
    write_fmow(tmp_path)
    ds = get_dataset("FMoW", tmp_path, 4)
    assert ds.domains[:5] == [f"train/{r}" for r in FMOW_REGIONS[:5]] and ds.domains[5:] == ["id_val", "id_test",
                                                                                            "val", "test"]
    assert [len(e) for e in ds.environments] == [5] * 5 + [4] * 4 and ds.num_classes == 62
    x, y, meta = ds.environments[8][3]  # OOD test, the 'Other' image
    assert x.dtype == torch.uint8 and x.shape == (3, 4, 4) and y == 61 and int(meta["year"]) == 2016
    assert int(meta["region"]) == FMOW_REGIONS.index("Other") and ds.evaluation.val_domain == "val"
    lao = get_dataset("FMoW-LAO", tmp_path, 4)
    asia = FMOW_REGIONS.index("Asia")
    for name, env in zip(lao.domains, lao.environments):
        assert bool((env.meta["region"] == asia).all()) == name.endswith("_asia") and len(env)
    regions = get_dataset("WILDSFMoW", tmp_path, 4)  # DomainBed's: every non-seq image, by region
    assert regions.domains == list(FMOW_REGIONS) and sum(map(len, regions.environments)) == len(fmow_rows()) - 1
    assert regions.evaluation is None and regions.eval_domains == ()


def test_evaluation_splits_must_be_held_out(tmp_path):
    write_fmow(tmp_path)
    ds = get_dataset("FMoW", tmp_path, 4)
    assert check_test_envs(ds, [8, 5, 6, 7]) == [5, 6, 7, 8]
    with pytest.raises(TestEnvError, match=r"7=val, 8=test are evaluation splits.*leave --test-envs out \(by default "
                                           r"a run on FMoW holds out exactly its evaluation splits\) \(got \[5, 6\]"):
        check_test_envs(ds, [5, 6])


def test_iwildcam_layout_locations_and_classes(tmp_path):
    write_iwildcam(tmp_path)
    ds = get_dataset("iWildCam", tmp_path / "iwildcam_v2.0", 4)  # the dataset folder itself also works
    assert ds.domains == ["train", "id_val", "id_test", "val", "test"] and ds.num_classes == 182
    assert ds.classes[:4] == ["empty", "1", "2", "deer"] and ds.eval_domains == ("id_val", "id_test", "val", "test")
    assert ds.classes[7] == "fox" and not {"unused_a", "unused_b"} & set(ds.classes)  # categories.csv's y = 99999
    _, y, meta = ds.environments[0][1]
    assert y == 3 and int(meta["location_id"]) == 1 and int(meta["hour"]) == 1
    train, ood = ds.environments[0].meta["location_id"].tolist(), ds.environments[3].meta["location_id"].tolist()
    assert set(train).isdisjoint(ood)


def test_camelyon_hospitals_and_patch_paths(tmp_path):
    write_camelyon(tmp_path)
    ds = get_dataset("Camelyon17", tmp_path, 4, n_per_domain=3)
    assert ds.domains == [f"hospital_{h}" for h in range(5)] and ds.classes == ["normal", "tumor"]
    assert [len(e) for e in ds.environments] == [3] * 5 and ds.eval_domains == ()
    assert ds.evaluation.val_domain == "hospital_1"
    full = get_dataset("Camelyon17", tmp_path, 4)
    assert full.environments[2].paths[0].endswith("patches/patient_002_node_0/patch_patient_002_node_0_x_100_y_202.png")
    assert full.environments[4].meta["slide"].tolist() == [8, 9, 8, 9] and full.environments[4].labels.tolist() == [
        0, 1, 0, 1]


def test_group_evaluation_follows_wilds_rules():
    fmow = GroupEvaluation("region", FMOW_REGIONS, exclude_substring="Other")
    # Asia 2/2, Europe 1/2, Other 0/1 (never the worst), Africa/Americas/Oceania empty (skipped)
    out = fmow.record("env7_", [0, 1, 2, 3, 4], [0, 1, 2, 0, 0], torch.tensor([0, 0, 1, 1, 5]))
    assert out["env7_acc_avg"] == pytest.approx(3 / 5) and out["env7_acc_worst_group"] == pytest.approx(0.5)
    assert out["env7_count_region:Africa"] == 0 and "env7_acc_region:Africa" not in out
    assert out["env7_acc_region:Other"] == 0.0 and "env7_f1_macro" not in out
    iwild = GroupEvaluation("location_id", f1_macro=True)  # unnamed groups: no per-group keys
    out = iwild.record("env4_", [0, 0, 1, 2], [0, 1, 1, 1], torch.tensor([3, 3, 9, 9]))
    assert out["env4_acc_worst_group"] == pytest.approx(0.5) and set(out) == {"env4_acc_avg", "env4_acc_worst_group",
                                                                             "env4_f1_macro"}
    assert out["env4_f1_macro"] == pytest.approx((2 / 3 + 1 / 2 + 0.0) / 3)  # F1 of classes 0, 1, 2
    empty = iwild.record("env1_", [], [], torch.zeros(0, dtype=torch.long))
    assert all(math.isnan(v) for v in empty.values())
    assert math.isnan(fmow.record("e_", [1], [1], torch.tensor([5]))["e_acc_worst_group"])  # only 'Other'


def _write_and_load(tmp_path, writer, rows, name):
    writer(tmp_path, rows)
    return lambda: get_dataset(name, tmp_path, 4)


@pytest.mark.parametrize("case, message", [
    ("fmow_lon", r"rgb_metadata.csv, row 2 \(line 4\), column 'lon': -274.0 is not in degrees \[-180, 180\]"),
    ("fmow_lat_text", r"rgb_metadata.csv, row 0 \(line 2\), column 'lat': 'north' is not a number"),
    ("fmow_category", r"rgb_metadata.csv, row 1 \(line 3\), column 'category': 'castle' is not one of"),
    ("fmow_time", r"rgb_metadata.csv, row 4 \(line 6\), column 'timestamp': 'yesterday' is not a date and time"),
    ("fmow_split", r"rgb_metadata.csv, row 0 \(line 2\), column 'split': 'dev' is not one of \['seq', 'test'"),
    ("iwildcam_y", r"metadata.csv, row 3 \(line 5\), column 'y': 182 is not in \[0, 182\)"),
    ("iwildcam_location", r"metadata.csv, row 0 \(line 2\), column 'location_remapped': 'cam7' is not a whole"),
    ("camelyon_center", r"metadata.csv, row 5 \(line 7\), column 'center': 5 is not in \[0, 5\) \(2 bad rows\)"),
])
def test_bad_metadata_names_file_row_and_column(tmp_path, case, message):
    if case.startswith("fmow"):
        rows = [list(r) for r in fmow_rows()]
        col = {"fmow_lon": (2, 5, -274.0), "fmow_lat_text": (0, 4, "north"), "fmow_category": (1, 1, "castle"),
               "fmow_time": (4, 3, "yesterday"), "fmow_split": (0, 0, "dev")}[case]
        rows[col[0]][col[1]] = col[2]
        load = _write_and_load(tmp_path, write_fmow, rows, "FMoW")
    elif case.startswith("iwildcam"):
        rows = [list(r) for r in iwildcam_rows()]
        if case == "iwildcam_y":
            rows[3][2] = 182
        else:
            rows[0][1] = "cam7"
        load = _write_and_load(tmp_path, write_iwildcam, rows, "iWildCam")
    else:
        rows = [list(r) for r in camelyon_rows()]
        rows[5][6] = rows[9][6] = 5
        load = _write_and_load(tmp_path, write_camelyon, rows, "Camelyon17")
    with pytest.raises(MetadataFileError, match=message) as err:
        load()
    assert "\n" not in str(err.value)


def test_missing_files_and_columns(tmp_path, cli):
    with pytest.raises(DataDirNotFoundError, match="no .*fmow_v1.1/rgb_metadata.csv"):
        get_dataset("FMoW", tmp_path)
    root = write_fmow(tmp_path)
    (root / "country_code_mapping.csv").unlink()
    with pytest.raises(DataDirNotFoundError, match="country_code_mapping.csv not found"):
        get_dataset("FMoW", tmp_path)
    write_camelyon(tmp_path)
    meta = root.parent / "camelyon17_v1.0" / "metadata.csv"
    pd.read_csv(meta).drop(columns=["slide"]).to_csv(meta, index=False)
    result = cli("train", "--dataset", "Camelyon17", "--data-dir", tmp_path, "--output-dir", tmp_path / "run")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "metadata.csv: no column 'slide'" in result.output
    write_iwildcam(tmp_path)
    (root.parent / "iwildcam_v2.0" / "train" / "t0.jpg").unlink()
    with pytest.raises(DataDirNotFoundError, match=r"train/t0.jpg not found: the first image of iWildCam domain"):
        get_dataset("iWildCam", tmp_path)


def test_data_list_shows_the_wilds_datasets(cli):
    result = cli("data", "list")
    assert result.exit_code == 0
    for name, dir_name in (("FMoW", "fmow_v1.1"), ("FMoW-LAO", "fmow_v1.1"), ("WILDSFMoW", "fmow_v1.1"),
                           ("iWildCam", "iwildcam_v2.0"), ("Camelyon17", "camelyon17_v1.0")):
        line = next(ln for ln in result.output.splitlines() if ln.startswith(name + " "))
        assert " wilds " in line and dir_name in line
