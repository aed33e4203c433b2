"""The download sources, declared once as data (`dgmoe.data.sources`): every catalogue dataset has a source or a
reason, the declarations are well-formed, and README.md shows the table they generate."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dgmoe.data.catalogue import DATASETS
from dgmoe.data.sources import DOWNLOADS, Part, Source, downloads, source_table

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "dgmoe data download --list --markdown -->"
BEGIN, END = f"<!-- BEGIN {MARK}", f"<!-- END {MARK}"


def test_every_catalogue_dataset_has_a_source_or_a_reason():
    import dgmoe.data.shifts  # noqa: F401 -- registers the shift and OOP datasets
    import dgmoe.data.wilds  # noqa: F401

    served = {n for d in DOWNLOADS for n in d.datasets}
    assert set(DATASETS.names()) <= served, sorted(set(DATASETS.names()) - served)
    assert all(d.sources or d.reason for d in DOWNLOADS)
    assert len(downloads()) == len(DOWNLOADS)  # names are unique


def test_the_folders_are_the_ones_the_catalogue_reads():
    for d in DOWNLOADS:
        for name in d.datasets:
            spec = DATASETS.get(name) if name in DATASETS else None
            if spec is not None and spec.kind == "folder" and spec.dir_name and d.sources:
                assert spec.dir_name in (d.dir_name, "CUB_DG"), (d.name, name)


def test_nothing_is_marked_verified_that_was_not():
    # no archive layout was checked from this project's machines: the table says "not verified" throughout
    assert not any(s.layout_verified for d in DOWNLOADS for s in d.sources)
    assert all(len(p.md5 or "0" * 32) == 32 and len(p.sha256 or "0" * 64) == 64
               for d in DOWNLOADS for s in d.sources for p in s.parts)


def test_a_source_of_an_unknown_kind_or_conversion_is_refused():
    with pytest.raises(ValueError, match="source kind"):
        Source("x", "ftp", (Part("u", "f"),), "l")
    with pytest.raises(ValueError, match="unknown conversion"):
        Source("x", "http", (Part("u", "f"),), "l", convert="nope")


def test_readme_shows_the_generated_table():
    text = README.read_text()
    found = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert found, f"README.md lacks the {BEGIN} ... {END} block"
    assert found.group(1) == source_table().markdown(title=False), \
        "README.md's source table differs from `dgmoe data download --list --markdown`: paste its output"


def test_list_prints_every_download_and_marks_unverified_layouts(cli):
    result = cli("data", "download", "--list")
    assert result.exit_code == 0, result.output
    for d in DOWNLOADS:
        assert d.name in result.output
    assert "not verified" in result.output and "none: the 24,788-image version" in result.output
