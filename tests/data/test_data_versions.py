"""Dataset versions (`dgmoe.data.versions`, `dgmoe data check`): the real PACS folder is the official version,
by counts and file-list hash; a copy with a domain missing or an image removed is named as no known version
with what differs; stand-in folders of TerraIncognita's two published sizes are told apart; a run records
the version it trained on and the tables print it."""
import json
import os
from pathlib import Path

from dgmoe.data.versions import PACS, TERRA_INCOGNITA, UNKNOWN, count_folder, identify


def _linked_copy(src: Path, dst: Path, skip_domain: str | None = None, drop: str | None = None) -> Path:
    """`src` as a tree of links (fast): without the domain `skip_domain` and without the file `drop`."""
    for domain in sorted(p for p in src.iterdir() if p.is_dir()):
        if domain.name == skip_domain:
            continue
        for cls in sorted(p for p in domain.iterdir() if p.is_dir()):
            (dst / domain.name / cls.name).mkdir(parents=True)
            for f in cls.iterdir():
                if f"{domain.name}/{cls.name}/{f.name}" != drop:
                    os.symlink(f, dst / domain.name / cls.name / f.name)
    return dst


def test_the_real_pacs_folder_is_the_official_version(shared_data, cli):
    found = count_folder(shared_data / "PACS")
    assert found.files_sha256 == PACS[0].files_sha256 and identify(found, PACS).version == PACS[0].name
    result = cli("data", "check", shared_data / "PACS")
    assert result.exit_code == 0 and "PACS: version official (9,991 images)" in result.output


def test_a_pacs_copy_with_a_domain_missing_or_an_image_removed_is_named_with_what_differs(shared_data, tmp_path, cli):
    no_sketch = _linked_copy(shared_data / "PACS", tmp_path / "a" / "PACS", skip_domain="sketch")
    result = cli("data", "check", no_sketch)
    assert result.exit_code == 1, result.output  # a doubtful folder fails the check (a script can gate on it)
    assert "no known version; closest is official (9,991 images)" in result.output
    assert "domain sketch missing" in result.output.splitlines()[-1]
    one_less_cli = _linked_copy(shared_data / "PACS", tmp_path / "c" / "PACS", drop="photo/dog/056_0001.jpg")
    result = cli("data", "check", one_less_cli)
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and last.startswith("dgmoe: error: FOLDER") and "matches no known version of PACS" \
        in last and "photo/dog: 188 images, the version has 189" in last, result.output
    one_less = _linked_copy(shared_data / "PACS", tmp_path / "b" / "PACS", drop="photo/dog/056_0001.jpg")
    match = identify(count_folder(one_less), PACS)
    assert match.version == UNKNOWN
    assert match.differences == ("photo: 1,669 images, the version has 1,670",
                                 "photo/dog: 188 images, the version has 189")


def _stand_in(root: Path, counts: dict[str, int]) -> Path:
    for domain, n in counts.items():
        folder = root / domain / "bobcat"
        folder.mkdir(parents=True)
        for i in range(n):
            (folder / f"{i}.jpg").touch()
    return root


def test_terra_incognitas_two_versions_are_told_apart(tmp_path, cli):
    old = dict(TERRA_INCOGNITA[0].counts)
    big = _stand_in(tmp_path / "old" / "terra_incognita", old)
    result = cli("data", "check", big.parent)  # the data root: its terra_incognita folder is found
    assert result.exit_code == 0 and "TerraIncognita: version 24,788 images" in result.output
    new = {**old, "location_38": old["location_38"] - 458}  # 24,330 images
    small = _stand_in(tmp_path / "new" / "terra_incognita", new)
    assert identify(count_folder(small), TERRA_INCOGNITA).version == TERRA_INCOGNITA[1].name
    result = cli("data", "check", small, "--dataset", "TerraIncognita")
    assert "TerraIncognita: version 24,330 images" in result.output


def test_check_names_another_datasets_domains_and_an_empty_folder(shared_data, tmp_path, cli):
    result = cli("data", "check", shared_data / "PACS", "--dataset", "VLCS")
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and "are not VLCS's" in last and "they are PACS's" in last, result.output
    (tmp_path / "e" / "PACS").mkdir(parents=True)
    result = cli("data", "check", tmp_path / "e" / "PACS")
    assert result.exit_code == 1 and "holds no image" in result.output, result.output
    stub = _stand_in(tmp_path / "s" / "VLCS", {"Caltech101": 2, "LabelMe": 2, "SUN09": 2})
    result = cli("data", "check", stub, "--dataset", "VLCS")
    assert result.exit_code == 1 and "domain VOC2007 missing" in result.output, result.output


def test_check_needs_a_folder_and_a_known_dataset(tmp_path, cli):
    result = cli("data", "check", tmp_path / "nope")
    assert result.exit_code == 2 and "FOLDER" in result.output and "not a directory" in result.output
    (tmp_path / "x" / "y").mkdir(parents=True)
    result = cli("data", "check", tmp_path / "x")
    assert result.exit_code == 2 and "--dataset" in result.output


def test_a_run_records_its_data_version_and_the_tables_print_it(shared_data, tmp_path, cli):
    from dgmoe.report.collect import load_records
    from dgmoe.report.results import results_tables

    out = tmp_path / "runs" / "pacs"
    result = cli("train", "--dataset", "PACS", "--data-dir", shared_data, "--model", "vit_micro_patch7_28",
                 "--model-kwargs", '{"depth": 1}', "--img-size", "28", "--steps", "1", "--checkpoint-freq", "1",
                 "--n-per-domain", "8", "--test-envs", "0", "--output-dir", out, "--progress", "none",
                 "--num-threads", "1", "--hparams", '{"batch_size": 2}')
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["dataset"]["version"] == PACS[0].name
    records = load_records(tmp_path / "runs")
    assert set(records["data_version"]) == {PACS[0].name}
    assert f"Data: PACS {PACS[0].name}, of which the runs used --n-per-domain 8 images per domain." in \
        results_tables(records, "iid")  # the folder's version, and what the runs took of it
