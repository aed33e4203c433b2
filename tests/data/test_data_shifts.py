"""The distribution-shift suites on tiny stand-ins in their published layouts: ImageNet with V2, R, Sketch, A and
ObjectNet (class facts, labels, ObjectNet's projection and border crop, one run evaluating every shift, the
shift table with effective robustness) and DomainBed-OOP (the OOP marks and the test domain's OOP accuracy)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from shift_fixtures import FACTS, write_imagenet_shifts, write_pacs_oop

from dgmoe.data import get_dataset, get_spec
from dgmoe.data.base import ClassMap
from dgmoe.data.errors import DataDirNotFoundError, LayoutError
from dgmoe.metrics import LogitFit, effective_robustness

TINY = ("--model", "vit_micro_patch7_28", "--img-size", "28", "--steps", "2", "--checkpoint-freq", "1",
        "--hparams", '{"batch_size": 4}', "--progress", "none", "--num-threads", "1")


def test_class_facts_have_the_published_sizes():
    assert len(FACTS["wnids"]) == len(FACTS["names"]) == 1000 and FACTS["wnids"] == sorted(FACTS["wnids"])
    assert FACTS["wnids"][0] == "n01440764" and FACTS["names"][0] == "tench"
    for key in ("imagenet_r", "imagenet_a"):
        assert len(FACTS[key]) == 200 and FACTS[key] == sorted(set(FACTS[key]))
    objectnet = FACTS["objectnet"]
    assert len(objectnet) == 113 and [c["folder"] for c in objectnet] == sorted(c["folder"] for c in objectnet)
    assert objectnet[0] == {"folder": "alarm_clock", "name": "Alarm clock", "imagenet": [409, 530]}
    spec = get_spec("ImageNetShifts")
    assert dict(spec.class_maps)["ObjectNet"].num_classes == 113 and spec.num_classes == 1000
    assert spec.shifts is not None and spec.shifts.shifts == ("ImageNet-V2", "ImageNet-R", "ImageNet-Sketch",
                                                              "ImageNet-A", "ObjectNet")


def test_class_map_projection_is_wise_ft_s():
    """A class's logit is the largest of its ImageNet classes' (wise-ft's ObjectNet `project_logits`, written
    here as its loop); single-class groups are the sub-list of the logits (its ImageNet-R/-A projection)."""
    logits = torch.randn(5, 1000, generator=torch.Generator().manual_seed(0))
    groups = tuple(tuple(c["imagenet"]) for c in FACTS["objectnet"])
    expected = np.zeros((5, 113))
    for k, members in enumerate(groups):
        expected[:, k] = np.max(logits.numpy()[:, list(members)], axis=1)
    assert torch.equal(ClassMap(groups).project(logits), torch.from_numpy(expected).float())
    r = ClassMap(tuple((i,) for i in FACTS["imagenet_r"]))
    assert torch.equal(r.project(logits), logits[:, FACTS["imagenet_r"]])
    with pytest.raises(ValueError):
        ClassMap(((1,), ()))


@pytest.fixture(scope="module")
def shifts_data(tmp_path_factory) -> tuple[Path, dict]:
    data = tmp_path_factory.mktemp("shifts") / "data"
    return data, write_imagenet_shifts(data)


def test_stand_in_loads_with_each_domain_s_labels(shifts_data):
    data, written = shifts_data
    ds = get_dataset("ImageNetShifts", data, img_size=8)
    assert ds.domains == list(get_spec("ImageNetShifts").domains) and ds.num_classes == 1000
    for d, env in zip(ds.domains, ds.environments):
        got = sorted(zip(env.paths, env.labels.tolist()))
        assert got == sorted((str(data / rel), label) for rel, label in written[d]), d
    objectnet = ds[ds.domains.index("ObjectNet")]
    assert not any("not_in_imagenet" in p for p in objectnet.paths)  # ObjectNet's other classes are left out
    # the 2-pixel border goes before the resize: a 12 x 12 image read at 8 px is its centre, pixel for pixel
    from PIL import Image
    x, _ = objectnet[0]
    centre = np.asarray(Image.open(objectnet.paths[0]).convert("RGB"))[2:-2, 2:-2].transpose(2, 0, 1)
    assert np.array_equal(x.numpy(), centre)


def test_missing_and_stray_folders_are_named(shifts_data, tmp_path):
    with pytest.raises(DataDirNotFoundError, match=r"lacks imagenet/train/ \(ImageNet\), .*objectnet-1.0/images/"):
        get_dataset("ImageNetShifts", tmp_path, img_size=8)
    data, _ = shifts_data
    stray = data / "imagenet-r" / "n01440764"  # tench: not one of ImageNet-R's 200 classes
    stray.mkdir()
    try:
        with pytest.raises(LayoutError, match="imagenet-r/n01440764 is not one of its class folders"):
            get_dataset("ImageNetShifts", data, img_size=8)
    finally:
        stray.rmdir()


def test_logit_fit_recovers_a_line_and_effective_robustness_is_the_gap():
    def sig(z):
        return 1 / (1 + math.exp(-z))

    ids = [0.55, 0.7, 0.8, 0.9]
    oods = [sig(0.8 * math.log(a / (1 - a)) - 0.5) for a in ids]
    fit = LogitFit.fit(ids, oods, "test")
    assert fit.slope == pytest.approx(0.8, abs=1e-12) and fit.intercept == pytest.approx(-0.5, abs=1e-12)
    assert effective_robustness(0.75, fit.baseline(0.75) + 0.03, fit) == pytest.approx(0.03, abs=1e-12)
    assert fit.baseline(0.0) == 0.0 and fit.baseline(1.0) == 1.0  # the limits (an untrained run scores 0)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        LogitFit.fit([0.5, 70.0], [0.2, 0.3], "percent by mistake")


@pytest.fixture(scope="module")
def shift_run(shifts_data, tmp_path_factory):
    from dgmoe.cli import run

    data, _ = shifts_data
    runs = tmp_path_factory.mktemp("shift_runs")
    assert run(["train", "--dataset", "ImageNetShifts", "--data-dir", str(data), *TINY,
                "--output-dir", str(runs / "erm")]) == 0  # no --test-envs: every evaluation domain held out
    return runs


def test_one_run_evaluates_every_shift_on_its_classes(shift_run, shifts_data):
    records = [json.loads(line) for line in (shift_run / "erm" / "results.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["args"]["test_envs"] == [1, 2, 3, 4, 5, 6]
    for i in range(1, 7):
        assert 0.0 <= last[f"env{i}_acc_all"] <= 1.0
    assert "env0_acc_all" not in last
    # the whole-domain accuracy is the in and out accuracies weighted by their sizes
    from dgmoe.data.splits import domain_splits
    ds = get_dataset("ImageNetShifts", shifts_data[0], img_size=28)
    splits = domain_splits(ds, 0.2, 0)
    for i in range(1, 7):
        n_in, n_out = len(splits[i][0]), len(splits[i][1])
        parts = [last[f"env{i}_in_acc"] * n_in] + ([last[f"env{i}_out_acc"] * n_out] if n_out else [])
        assert last[f"env{i}_acc_all"] == pytest.approx(sum(parts) / (n_in + n_out), abs=1e-12)


def test_evaluation_scores_projected_logits():
    """A predictor whose largest logit is a class outside ImageNet-R but whose best ImageNet-R class is right is
    right on ImageNet-R, and its loss is the cross-entropy over the 200 classes."""
    from dgmoe.data.arrays import ArrayDomain
    from dgmoe.data.base import MultiDomainDataset
    from dgmoe.data.transforms import ToFloat
    from dgmoe.engine.evaluate import evaluate_domains

    r = FACTS["imagenet_r"]
    labels = np.array([0, 5, 7], dtype=np.int64)  # ImageNet-R labels (ImageNet classes r[0], r[5], r[7])

    class Predictor(torch.nn.Module):
        def predict(self, x, meta=None):
            logits = torch.zeros(len(x), 1000)
            logits[:, 0] = 10.0  # tench: not in ImageNet-R
            logits[torch.arange(len(x)), torch.as_tensor([r[k] for k in labels[:len(x)]])] = 5.0
            return logits

    env = ArrayDomain(np.zeros((3, 3, 4, 4), np.uint8), labels)
    ds = MultiDomainDataset("toy", ["a", "ImageNet-R"], list(map(str, range(1000))), [env, env], (3, 4, 4),
                            class_maps={"ImageNet-R": ClassMap(tuple((i,) for i in r))})
    splits = [(np.arange(3), np.arange(0)), (np.arange(3), np.arange(0))]
    out = evaluate_domains(Predictor(), ds, splits, ToFloat(), "cpu", test_envs=[1])
    assert out["env1_in_acc"] == 1.0  # scored over ImageNet-R's 200 classes
    assert out["env0_in_acc"] == pytest.approx(1 / 3)  # over all 1,000: tench (label 0) wins every item
    expected = F.cross_entropy(torch.full((1, 200), 0.0).index_fill(1, torch.tensor([0]), 5.0), torch.tensor([0]))
    assert out["env1_in_loss"] == pytest.approx(float(expected), abs=1e-6)


def test_results_table_names_each_shift_and_effective_robustness(shift_run, cli, tmp_path):
    result = cli("results", shift_run, "--no-save")
    assert result.exit_code == 0, result.output
    assert "### ImageNetShifts: accuracy on ImageNet-val and each shift" in result.output
    header = next(line for line in result.output.splitlines() if line.startswith("| Algorithm"))
    for name in ("ImageNet-val", "ImageNet-V2", "ImageNet-R", "ImageNet-Sketch", "ImageNet-A", "ObjectNet",
                 "Avg shifts"):
        assert name in header
    assert "No effective robustness: give a baseline testbed with --shift-fit" in result.output
    testbed = tmp_path / "testbed.csv"
    testbed.write_text("model,ImageNet-val,ImageNet-V2,ObjectNet\nA,60,48,30\nB,70,58,38\nC,80,69,47\n")
    result = cli("results", shift_run, "--no-save", "--shift-fit", testbed)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "ER ImageNet-V2" in out and "ER ObjectNet" in out and "ER ImageNet-R" not in out  # the testbed's shifts
    fit = LogitFit.fit([0.6, 0.7, 0.8], [0.48, 0.58, 0.69], "x")
    assert f"ImageNet-V2: slope {fit.slope:.4f}, intercept {fit.intercept:.4f} (testbed.csv, 3 models)" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| ERM"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    id_acc, v2 = (float(cells[k].split(" ")[0]) / 100 for k in (1, 2))
    er = float(cells[8].split(" ")[0])  # after the ID column, five shifts and their average
    assert er == pytest.approx(100 * (v2 - fit.baseline(id_acc)), abs=0.1 + 1e-9)
    bad = tmp_path / "bad.csv"
    bad.write_text("model,top1\nA,60\n")
    result = cli("results", shift_run, "--no-save", "--shift-fit", bad)
    assert result.exit_code != 0 and "no column 'ImageNet-val'" in result.output and "Traceback" not in result.output


def test_domainbed_oop_marks_and_table(tmp_path, cli):
    from dgmoe.cli import run

    data = tmp_path / "data"
    oop = write_pacs_oop(data)
    ds = get_dataset("PACS-OOP", data, img_size=8)
    for d, env in zip(ds.domains, ds.environments):
        marked = {p.split(f"{data}/PACS/")[1] for p, f in zip(env.paths, env.meta["pretraining"].tolist()) if f}
        assert marked == {o for o in oop if o.startswith(d + "/")}
    assert run(["train", "--dataset", "PACS-OOP", "--data-dir", str(data), "--test-envs", "0", *TINY,
                "--output-dir", str(tmp_path / "runs" / "erm")]) == 0
    last = json.loads((tmp_path / "runs" / "erm" / "results.jsonl").read_text().splitlines()[-1])
    assert last["env0_count_pretraining:OOP"] == 7 and last["env0_count_pretraining:IP"] == 7
    result = cli("results", tmp_path / "runs", "--no-save", "--selection", "oracle")
    assert result.exit_code == 0, result.output
    assert "### PACS-OOP: accuracy on the test domain's out-of-pretraining images" in result.output
    (data / "DomainBed_OOP/hard/PACS/photo/dog/extra.png").write_bytes((data / "PACS/photo/dog/0.png").read_bytes())
    with pytest.raises(LayoutError, match="photo/dog/extra.png is not in"):
        get_dataset("PACS-OOP", data, img_size=8)


def test_report_shows_the_shift_table(shift_run, cli):
    result = cli("report", shift_run, "--no-params", "--pages", "none")
    assert result.exit_code == 0, result.output
    page = (shift_run / "report" / "index.html").read_text()
    assert "ImageNetShifts: accuracy on ImageNet-val and each shift" in page and "ObjectNet" in page
    assert "hold out several test domains" not in page  # not left out as runs without a table


def test_the_smoke_scale_s_stand_in_folders_load_with_every_domain(tmp_path):
    """The recipes' smoke scale writes these (`dgmoe.recipes.plan.SmokeData`): every domain of the suite holds
    images, read through the real loader with each domain's own labels; a second write leaves them."""
    from dgmoe.data.shifts import STAND_INS
    from dgmoe.data.shifts.stand_in import stand_in_classes

    assert STAND_INS["ImageNetShifts"](tmp_path) is True
    before = sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*.png"))
    assert STAND_INS["ImageNetShifts"](tmp_path) is False
    assert sorted(p.stat().st_mtime_ns for p in tmp_path.rglob("*.png")) == before
    ds = get_dataset("ImageNetShifts", tmp_path, img_size=8)
    labels = {d: sorted(set(env.labels.tolist())) for d, env in zip(ds.domains, ds.environments)}
    classes = list(stand_in_classes())
    assert labels["ImageNet"] == labels["ImageNet-val"] == labels["ImageNet-V2"] == classes
    assert labels["ImageNet-R"] == [FACTS["imagenet_r"].index(c) for c in classes]
    assert labels["ImageNet-A"] == [FACTS["imagenet_a"].index(c) for c in classes]
    assert labels["ObjectNet"] == list(range(len(classes)))
