"""The self-contained HTML report: Markdown rendering, and an end-to-end render of a small run in Chromium."""
import base64
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from dgmoe.report.html import build_report, img_tag, markdown_to_html


def test_markdown_subset():
    md = "# Title\n\nSome `code` and **bold** <x>.\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n| 3 | 4 |\n\n- one\n- two\n" \
         "- a *wrapped*\n  item\n\n```\nraw <b>\n```\n"
    out = markdown_to_html(md, heading_offset=1)
    assert "<h2>Title</h2>" in out
    assert "<p>Some <code>code</code> and <strong>bold</strong> &lt;x&gt;.</p>" in out
    assert "<tr><th>a</th><th>b</th></tr>" in out and "<tr><td>3</td><td>4</td></tr>" in out
    assert "<ul><li>one</li><li>two</li><li>a <em>wrapped</em> item</li></ul>" in out
    assert "<pre><code>raw &lt;b&gt;</code></pre>" in out


def test_img_tag_is_a_data_uri():
    tag = img_tag(b"\x89PNG-bytes", 'a "quoted" alt')
    src = re.search(r'src="data:image/png;base64,([^"]+)"', tag).group(1)
    assert base64.b64decode(src) == b"\x89PNG-bytes" and "&quot;quoted&quot;" in tag


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
    from dgmoe.engine.config import TrainConfig
    from dgmoe.engine.train import train

    root = tmp_path_factory.mktemp("runs")
    run = root / "gmoe_debug"
    train(TrainConfig(dataset="Debug28", test_envs=(0,), model=MODEL, patch_size=7, output_dir=str(run),
                      steps=3, checkpoint_freq=1, progress="none", num_threads=1))
    imgs = load_run_images(run, n_per_domain=3)
    analyze_routing(imgs, run / "analysis", show=2)
    analyze_attention(imgs, run / "analysis", show=1)
    return root


def test_report_cli_embeds_everything(small_run, tmp_path):
    from dgmoe.cli.report import command

    cost = tmp_path / "cost.md"
    cost.write_text("## Cost table (docs)\n\n| model | step time |\n|---|---|\n| GMoE-S/16 | 1.0 |\n")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(command, [str(small_run), "--out", str(out), "--include", str(cost)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert page.count("<table>") >= 5  # results (3 selections x 2), cost, usage, redundancy, included
    assert "Training-domain validation set".lower() in page.lower() and "GMoE-S/16" in page
    layers = _moe_layers(small_run / "gmoe_debug")
    assert len(layers) == 2 and MODEL in page and all(layer in page for layer in layers)
    srcs = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert len(srcs) >= 5 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched when opened offline
    for name in (f"routing_{layers[0]}", "expert_usage", "attention_maps"):
        assert f"<h4>{name}</h4>" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(args, tmp_path, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chrome-profile'}"]
    return subprocess.run([_chromium(), *flags, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (Debian package `chromium`, "
                                                "installed by .ci/run): the report screenshot test needs it")
def test_report_renders_in_headless_chromium(small_run, tmp_path):
    page = build_report(small_run, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    proc = _headless([f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()], tmp_path)
    assert shot.is_file(), f"chromium wrote no screenshot: {proc.stderr[-2000:]}"
    img = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert img.shape == (2000, 1280)
    assert img.std() > 10 and (img < 128).mean() > 0.005  # text, tables and figures, not a blank page
    dom = _headless(["--dump-dom", page.as_uri()], tmp_path).stdout
    assert dom.count("<table>") >= 5 and dom.count("<img") >= 5 and "data:image/png;base64," in dom


def test_routing_cli_on_a_run(small_run, tmp_path):
    from dgmoe.cli.analyze import command

    run = small_run / "gmoe_debug"
    res = CliRunner().invoke(command, ["routing", str(run), "--out", str(tmp_path), "--n-images", "2", "--show", "1",
                                       "--mode", "colors"])
    assert res.exit_code == 0, res.output
    layers = _moe_layers(run)
    assert f"| {layers[0]} | 0 |" in res.output
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
    assert "analysed" in res.output
    assert (runs / "r1" / "analysis" / "expert_usage.md").is_file()
    assert f"<h4>routing_{_moe_layers(small_run / 'gmoe_debug')[1]}</h4>" in (runs / "report.html").read_text()
