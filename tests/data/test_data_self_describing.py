"""Self-describing datasets: everything a dataset decides is in its catalogue entry (`DatasetSpec`), so no code
outside the catalogue compares a dataset's name, and a dataset declared in a test trains, is selected,
reported and gets its hyperparameters without touching another file."""
import ast
import json
from pathlib import Path

import pytest

from dgmoe.data.catalogue import DATASETS, DatasetSpec
from dgmoe.hparams import DatasetHParams, HParam, fixed

SRC = Path(__file__).resolve().parents[2] / "src" / "dgmoe"


def _declares_datasets(path: Path) -> bool:
    """The catalogue and the modules that declare its entries."""
    return path.parts[-3:-1] == ("dgmoe", "data") and path.name in ("catalogue.py", "dataset_hparams.py") or (
        "DatasetSpec(" in path.read_text())


def name_comparisons(root: Path, names: set[str]) -> list[str]:
    """`file:line` of every comparison (==, !=, in, not in, .startswith/.endswith) with a dataset name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if _declares_datasets(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("startswith", "endswith")):
                parts = list(node.args)
            else:
                continue
            strings = {c.value for p in parts for c in ast.walk(p) if isinstance(c, ast.Constant)
                       and isinstance(c.value, str)}
            if strings & names or any(s and any(n.startswith(s) for n in names) for s in strings
                                      if isinstance(node, ast.Call) and len(s) >= 4):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_code_outside_the_catalogue_compares_a_dataset_name():
    names = set(DATASETS.names())
    assert not name_comparisons(SRC, names)


def test_the_scan_finds_comparisons(tmp_path):
    (tmp_path / "a.py").write_text('small = dataset in ("PACS", "X")\nif name.startswith("FMoW"):\n    pass\n'
                                   'ok = dataset == other\n')
    assert [f.split(":")[1] for f in name_comparisons(tmp_path, {"PACS", "FMoW-LAO"})] == ["1", "2"]


@pytest.fixture
def tiny_dataset(tmp_path, monkeypatch):
    """A dataset declared here, and only here: three domains of two solid-colour classes."""
    from PIL import Image

    domains = ("d0", "d1", "d2")
    for d, dom in enumerate(domains):
        for c, cls in enumerate(("ant", "bee")):
            folder = tmp_path / "data" / "tiny_dg" / dom / cls
            folder.mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (10, 10), (60 * d + 20 * i, 200 * c, 30)).save(folder / f"{i}.png")
    spec = DatasetSpec("TinyDG", "folder", domains, 2, "tiny_dg", n_steps=3, checkpoint_freq=1,
                       reference="a test's own dataset",
                       hparams=DatasetHParams(gmoe_lr_wd=(2e-4, 1e-5), batch_size_log2_max=3.5,
                                              algorithms={"MIRO": {"ld": HParam(0.5, fixed(0.5))}}))
    monkeypatch.setitem(DATASETS._items, "TinyDG", spec)
    return tmp_path


def test_a_dataset_declared_in_a_test_gets_hparams_trains_selects_and_reports(tiny_dataset, cli):
    from dgmoe.engine.hparams import hparam_specs, run_hparams
    from dgmoe.report.collect import load_records
    from dgmoe.report.results import results_tables
    from dgmoe.selection import sweep_accs

    sparse = run_hparams("ERM", "TinyDG", "gmoe_micro_patch7_28", 0, 0)
    assert (sparse["lr"], sparse["weight_decay"]) == (2e-4, 1e-5)
    assert hparam_specs("MIRO", "TinyDG")["ld"].default == 0.5
    assert run_hparams("ERM", "TinyDG", "vit_micro_patch7_28", 1, 0)["batch_size"] < 2 ** 3.5
    out = tiny_dataset / "runs" / "tiny"
    result = cli("train", "--dataset", "TinyDG", "--data-dir", tiny_dataset / "data", "--model",
                 "vit_micro_patch7_28", "--model-kwargs", '{"depth": 1}', "--img-size", "28", "--test-envs", "0",
                 "--output-dir", out, "--progress", "none", "--num-threads", "1", "--hparams", '{"batch_size": 4}')
    assert result.exit_code == 0, result.output
    records = load_records(tiny_dataset / "runs")
    assert set(records["dataset"]) == {"TinyDG"} and records["step"].max() == 2  # the declared schedule
    assert set(sweep_accs(records, "iid")["dataset"]) == {"TinyDG"}
    tables = results_tables(records, "iid")
    assert "### TinyDG" in tables and "d0" in tables
    config = json.loads((out / "config.json").read_text())
    assert config["dataset"]["name"] == "TinyDG"
    info = config["model_info"]  # the ModelInfo of the network that trained
    assert info["architecture"] == "vit_micro_patch7_28" and info["sparse"] is None and info["family"] == "vit"
