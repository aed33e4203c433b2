"""The WiSE-FT parts of clip-robust-domainbed: the launch plans their two parts and makes the soups once those
are done; at the smoke scale (a 2-step fine-tune and a 0-step zero-shot run of the CLIP micro stand-in on ImageNet
stand-in folders, then 12 soups) end to end, and `dgmoe results --recipe` reports their rows."""
import json

import pytest

ROWS = ("WiSE-FT alpha=0.5, ImageNet -> shifts", "WiSE-FT optimal alpha per column, ImageNet -> shifts")


def _rows(*labels):
    return [a for label in labels for a in ("--rows", label)]


def test_a_wise_ft_row_launches_its_two_parts_and_then_its_soups(cli, tmp_path):
    result = cli("recipe", "launch", "clip-robust-domainbed", "--scale", "smoke", "--output-dir", tmp_path / "out",
                 "--launcher", "dummy", *_rows(ROWS[0]))
    assert result.exit_code == 0, result.output
    assert "imagenet-zero-shot: 1 job(s)" in result.output and "imagenet-fine-tune: 1 job(s)" in result.output
    assert "imagenet-wise-ft: would make WiSE-FT soups of imagenet-fine-tune against imagenet-zero-shot" in \
        result.output


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 3 minutes on 2 idle CPU cores; far more on a shared machine
def test_wise_ft_part_runs_end_to_end_at_the_smoke_scale(cli, tmp_path):
    out = tmp_path / "robust"
    result = cli("recipe", "launch", "clip-robust-domainbed", "--scale", "smoke", "--output-dir", out,
                 "--max-workers", "2", *_rows(*ROWS))
    assert result.exit_code == 0, result.output
    assert "failed" not in result.output
    soups = sorted(p.parent for p in (out / "imagenet-wise-ft").rglob("config.json"))
    algorithms = {json.loads((s / "results.jsonl").read_text().splitlines()[-1])["args"]["algorithm"] for s in soups}
    assert algorithms == {"ERM (WiSE-FT)", *(f"ERM (WiSE-FT alpha={k / 10:g})" for k in range(11))}
    assert "imagenet-wise-ft" in json.loads((out / "recipe.json").read_text())["parts"]
    again = cli("recipe", "launch", "clip-robust-domainbed", "--scale", "smoke", "--output-dir", out,
                "--max-workers", "2", *_rows(*ROWS))
    assert again.exit_code == 0 and "is made already" in again.output, again.output
    report = cli("results", out, "--recipe", "clip-robust-domainbed")
    assert report.exit_code == 0, report.output
    for label in ROWS:
        line = next(x for x in report.output.splitlines() if x.startswith(f"| {label} "))
        assert line.rstrip(" |").split("|")[-1].strip() not in ("X", ""), line


def test_at_the_smoke_scale_a_soup_row_reads_its_own_soup_part_only(cli, tmp_path):
    """Parts may share one smoke configuration, so a sweep row may read another part's runs; a soup is made per
    part, so the fine-tune's WiSE-FT row never reads the adapter experts' soups (same stand-in backbone)."""
    from recipe_sweep import write_run

    from dgmoe.data.catalogue import get_spec

    (tmp_path / "recipe.json").write_text(json.dumps({"recipe": "clip-robust-domainbed", "scale": "smoke",
                                                      "rows": [], "parts": ["wise-ft-adapter-experts"]}))
    write_run(tmp_path / "wise-ft-adapter-experts" / "soup", "Debug28", get_spec("Debug28").domains, "ERM (WiSE-FT)",
              "vit_micro_patch7_clip_quickgelu_28", [0], {0: 0.75})
    result = cli("results", tmp_path, "--recipe", "clip-robust-domainbed", "--no-save")
    assert result.exit_code == 0, result.output
    line = lambda label: next(x for x in result.output.splitlines() if x.startswith(f"| {label} "))  # noqa: E731
    assert line("WiSE-FT of adapter experts, alpha chosen on validation (ViT-B/16)").endswith("| 75.0 +/- 0.0 |")
    assert line("WiSE-FT of the fine-tune, alpha chosen on validation (ViT-B/16)").endswith("|            X |")


def test_soups_wait_for_their_parts_and_say_so(tmp_path):
    """A launcher that returns before the runs end (Slurm): the soups are not made, and a line says why."""
    from dgmoe.recipes import get_recipe
    from dgmoe.recipes.soups import make_wise_ft

    lines = []
    part = get_recipe("clip-robust-domainbed").part("imagenet-wise-ft")
    assert make_wise_ft(part, tmp_path, lines.append) == [] and not (tmp_path / "imagenet-wise-ft").exists()
    assert lines == [f"imagenet-wise-ft: WiSE-FT soups not made yet: part imagenet-fine-tune has no finished run in "
                     f"{tmp_path / 'imagenet-fine-tune'}; launch again once they are done"]
