"""The HTML report of a real (tiny) run: Markdown rendering, the run's page with its analysis figures, and an
end-to-end render in headless Chromium."""
import re
import shutil

import headless
import pytest
import torch
from click.testing import CliRunner
from md_tables import table_rows

from dgmoe.report.html import build_report, markdown_to_html


def test_markdown_rendering():
    """Included Markdown goes through markdown-it-py: CommonMark, pipe tables in a scrolling box, raw HTML and
    `javascript:` links kept as text."""
    md = "# Title\n\nSome `code` and **bold** <x>.\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n| 3 | 4 |\n\n- one\n- two\n" \
         "- a *wrapped*\n  item\n\n```\nraw <b>\n```\n\n[x](javascript:alert(1)) [y](docs/a.md)\n"
    out = markdown_to_html(md, heading_offset=1)
    assert "<h2>Title</h2>" in out
    assert "<p>Some <code>code</code> and <strong>bold</strong> &lt;x&gt;.</p>" in out
    assert '<th style="text-align:left">a</th>' in out and '<td style="text-align:right">4</td>' in out
    assert '<div class="scroll"><table>' in out and "</table></div>" in out  # a wide table scrolls in the page
    assert "<li>one</li>" in out and "<li>a <em>wrapped</em>\nitem</li>" in out
    assert "<pre><code>raw &lt;b&gt;\n</code></pre>" in out
    assert "javascript:" not in out.replace("[x](javascript:alert(1))", "") and '<a href="docs/a.md">y</a>' in out


def test_heading_anchors_are_unique():
    out = markdown_to_html("# A b\n\n## A b\n", id_prefix="x")
    assert '<h1 id="x-a-b">A b</h1>' in out and '<h2 id="x-a-b-2">A b</h2>' in out


def test_errors_name_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results.jsonl"):
        build_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_report(tmp_path / "missing")


MODEL = "gmoe_tiny_patch16_224"  # at 28 px with 7 px patches: a 4x4 grid, MoE in the last two even blocks


def _moe_layers(run) -> list[str]:
    return sorted(p.stem.removeprefix("routing_") for p in (run / "analysis").glob("routing_*.png"))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A real (tiny) GMoE run on Debug28 plus its `dgmoe analyze` outputs."""
    from dgmoe.analysis.pipeline import analyze_attention, analyze_routing, load_run_images
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.trainer import train

    root = tmp_path_factory.mktemp("runs")
    run = root / "gmoe_debug"
    train(RunConfig.from_flat(dataset="Debug28", test_envs=(0,), model=MODEL, patch_size=7, output_dir=str(run),
                      steps=3, checkpoint_freq=1, progress="none", num_threads=1))
    imgs = load_run_images(run, n_per_domain=3)
    analyze_routing(imgs, run / "analysis", show=2)
    analyze_attention(imgs, run / "analysis", show=1)
    return root


def _run_page(index) -> str:
    return next((index.parent / "runs").glob("*.html")).read_text()


def test_report_cli_writes_index_run_page_and_figures(small_run, tmp_path):
    from dgmoe.cli.report import command

    cost = tmp_path / "cost.md"
    cost.write_text("## Cost table (docs)\n\n| model | step time |\n|---|---|\n| GMoE-S/16 | 1.0 |\n")
    out = tmp_path / "report"
    res = CliRunner().invoke(command, [str(small_run), "--out", str(out), "--include", str(cost)])
    assert res.exit_code == 0, res.output
    index = (out / "index.html").read_text()
    assert index.count("<table>") >= 8  # results (3 selections x 2), run index, cost, included
    assert "training-domain validation set" in index.lower() and "GMoE-S/16" in index
    assert "8.43" in index  # parameters (M), counted by rebuilding the run's network
    page = _run_page(out / "index.html")
    layers = _moe_layers(small_run / "gmoe_debug")
    assert len(layers) == 2 and f"ERM / {MODEL}(patch_size=7) / test 0</h1>" in page
    for caption in ("Top-1 expert per patch, block 8 (blocks.8.mlp)",
                    "Top-1 expert per patch, block 10 (blocks.10.mlp)", "Expert usage per domain",
                    "CLS attention per head"):
        assert f"<figcaption>{caption}</figcaption>" in page
    srcs = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert len(srcs) == 5 and all((out / "runs" / s).resolve().is_file() for s in srcs)
    order = [page.index(f"<figcaption>{c}") for c in ("Top-1 expert per patch, block 8",
                                                      "Top-1 expert per patch, block 10", "Expert usage",
                                                      "CLS attention")]
    assert order == sorted(order)  # routing by block number, then usage, then attention
    assert not re.search(r'(src|href)="(https?:)?//', index + page)  # nothing fetched when opened offline


@pytest.mark.skipif(headless.chromium() is None, reason=headless.SKIP_REASON)
def test_report_renders_in_headless_chromium(small_run, tmp_path):
    index = build_report(small_run, tmp_path / "report")
    page = next((index.parent / "runs").glob("*.html"))
    facts, dom = headless.probe(page, tmp_path / "profile", height=2000)
    assert facts["scrollWidth"] <= 1280 and len(facts["images"]) == 5
    assert all(img["done"] for img in facts["images"]), facts["images"]  # every figure file found and decoded
    assert dom.count("<figcaption>") == 4 and "Expert usage per domain" in dom
    shot = headless.screenshot(page, tmp_path / "shot.png", tmp_path / "profile", 1280, 2000)
    assert shot.std() > 10 and (shot < 128).mean() > 0.005  # text, tables and figures, not a blank page
    first = facts["images"][0]  # the accuracy chart, drawn where the page puts it
    (similarity,) = headless.shown_figures(page, [first], tmp_path / "figure.png", tmp_path / "profile", 1280, 2000)
    assert similarity > 0.9, (first["alt"], similarity)


def test_routing_cli_on_a_run(small_run, tmp_path):
    from dgmoe.cli.analyze import command

    run = small_run / "gmoe_debug"
    res = CliRunner().invoke(command, ["routing", str(run), "--out", str(tmp_path), "--n-images", "2", "--show", "1",
                                       "--mode", "colors"])
    assert res.exit_code == 0, res.output
    layers = _moe_layers(run)
    assert [layers[0], "0"] in [row[:2] for row in table_rows(res.output)]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(["expert_usage.png",
                                                                     *(f"routing_{x}.png" for x in layers)])
    usage = (tmp_path / "expert_usage.csv").read_text().splitlines()
    assert usage[0] == "layer,domain,expert,fraction" and len(usage) == 1 + 2 * 3 * 6
    assert torch.tensor([float(line.split(",")[-1]) for line in usage[1:]]).sum().item() == pytest.approx(6.0)


def test_report_analyze_flag_fills_missing_analysis(small_run, tmp_path):
    from dgmoe.cli.report import command

    runs = tmp_path / "runs"
    shutil.copytree(small_run / "gmoe_debug", runs / "r1", ignore=shutil.ignore_patterns("analysis"))
    res = CliRunner().invoke(command, [str(runs), "--analyze", "--n-images", "2", "--no-params"])
    assert res.exit_code == 0, res.output
    assert f"analysed {runs / 'r1'}" in res.output and "1 analysed, 0 already analysed, 0 could not" in res.output
    assert (runs / "r1" / "analysis" / "expert_usage.md").is_file()
    assert "<figcaption>Top-1 expert per patch, block 10 (blocks.10.mlp)</figcaption>" in _run_page(
        runs / "report" / "index.html")
