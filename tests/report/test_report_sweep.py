"""The report of a sweep (26 synthetic runs, no training): contents, run index, naming, size budget, odd names,
`--analyze` failures stated, and the rendered pages in headless Chromium (screenshots, layout width)."""
import html
import re
from pathlib import Path

import headless
import pytest
from click.testing import CliRunner
from report_sweep import GEO, PACS, WEIRD, make_sweep, write_run

from dgmoe.report.html import build_report, index_budget, report_budget, report_size, size_budget

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"  # wide tables and long code lines


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """(root, roles, index page, CLI output) of the sweep's report, written by `dgmoe report --include`."""
    from dgmoe.cli.report import command

    root = tmp_path_factory.mktemp("sweep")
    roles = make_sweep(root)
    res = CliRunner().invoke(command, [str(root), "--include", str(DOCS), "--title", "Sweep <report>", "--no-params"])
    assert res.exit_code == 0, res.output
    return root, roles, root / "report" / "index.html", res.output


def _runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("results.jsonl") if "report" not in p.parts)


def _cells(row: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def _group_rows(page: str) -> list[str]:
    """The run index's rows: one per group, its run count linked to the group's first page."""
    return [r for r in re.findall(r"<tr>.*?</tr>", page, re.S) if 'href="groups/' in r or 'href="../groups/' in r]


def test_index_has_contents_with_working_anchors(sweep):
    _, _, index, _ = sweep
    page = index.read_text()
    toc = re.search(r'<nav class="toc".*?</nav>', page, re.S).group(0)
    anchors = re.findall(r'href="#([^"]+)"', toc)
    assert {"results", "runs", "cost", "include-benchmarks"} <= set(anchors)
    assert all(f'id="{a}"' in page for a in anchors)  # every entry leads somewhere
    assert sum("Model selection" in t for t in re.findall(r">([^<]+)</a>", toc)) == 3  # the three methods
    assert page.index('id="results"') < page.index('id="runs"') < page.index('id="cost"')
    assert "<title>Sweep &lt;report&gt;</title>" in page


def test_index_groups_the_runs_and_every_run_is_listed_once(sweep):
    root, roles, index, _ = sweep
    page = index.read_text()
    rows = _group_rows(page)
    assert len(rows) == 25  # 16 PACS singles, 6 pairs, 1 odd, 2 geo groups; the unfinished run joins a group
    listed = []
    for row in rows:
        algorithm, model, held_out, n_runs = _cells(row)[:4]
        assert algorithm in ("ERM", "CORAL", "MoGE") and model.split("(")[0].endswith("patch16_224")
        assert set(held_out.split(", ")) <= set(PACS) or held_out.startswith("NorthAmerica/test") \
            or held_out == "x$\\frac$y"
        group = index.parent / html.unescape(re.search(r'href="([^"]+)"', row).group(1))
        text = group.read_text()
        assert f"{html.escape(algorithm)} / {html.escape(model)} / test " in text
        run_rows = [r for r in re.findall(r"<tr><td.*?</tr>", text, re.S)]
        assert len(run_rows) == int(n_runs)
        for run_row in run_rows:
            listed.append(_cells(run_row)[0])
            link = re.search(r'href="([^"]+)"', run_row)
            if link:  # a run with its own page
                target = group.parent / html.unescape(link.group(1))
                assert f"<h1>{html.escape(algorithm)} / {html.escape(model)} / test " in target.read_text()
    assert sorted(listed) == sorted(str(p.relative_to(root)) for p in _runs(root))  # each run once
    geo = next(r for r in rows if ">MoGE<" in r)
    geo_page = (index.parent / html.unescape(re.search(r'href="([^"]+)"', geo).group(1))).read_text()
    assert "6 domains: NorthAmerica/test, CentralAmerica/test, SouthAmerica/test, ..." in geo_page
    assert "(worst " in geo_page  # several test domains: the mean and the worst
    assert "unfinished" in (index.parent / "groups").joinpath(next(
        p.name for p in (index.parent / "groups").glob("*.html") if "still_training" in p.read_text())).read_text()
    assert "GeoMNIST" in page and "hold out several test domains" in page
    cost = page[page.index('id="cost"'):page.index('id="include-benchmarks"')]
    assert "CORAL</td><td class=\"l\">gmoe_tiny_patch16_224</td><td>4</td>" in cost  # named, not hashed
    assert not re.search(r"\b[0-9a-f]{12,}\b", cost)
    assert not re.search(r"\d\.\d{4}", cost)  # timings rounded to their spread, not four decimals


def test_filters_list_the_groups_of_one_dataset_algorithm_model_or_held_out_domain(sweep):
    _, _, index, _ = sweep
    page = index.read_text()
    bar = re.search(r'<nav class="toc" aria-label="Filters">.*?</nav>', page, re.S).group(0)
    links = dict((html.unescape(re.sub(r" \(\d+\)$", "", t)), h) for h, t in
                 re.findall(r'<a href="(by/[^"]+)">([^<]+)</a>', bar))
    assert {"PACS", "GeoMNIST", "ERM", "CORAL", "MoGE", "photo", "vit_tiny_patch16_224"} <= set(links)
    coral = (index.parent / links["CORAL"]).read_text()
    rows = _group_rows(coral)
    assert len(rows) == 8 and all(_cells(r)[1] == "CORAL" for r in rows)  # 2 models x 4 held-out domains
    photo = (index.parent / links["photo"]).read_text()
    assert all("photo" in _cells(r)[3] for r in _group_rows(photo)) and len(_group_rows(photo)) == 4 + 3


def test_only_selected_runs_get_pages_unless_asked(tmp_path):
    from report_sweep import make_runs

    make_runs(tmp_path / "runs", 16)
    for trial in (1, 2):  # more trial seeds: several runs per group, one page (the best) each
        for k, env in enumerate(range(len(PACS))):
            write_run(tmp_path / "runs" / f"t{trial}_{env}", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [env],
                      trial_seed=trial)
    index = build_report(tmp_path / "runs", count_params=False)
    pages = list((index.parent / "runs").glob("*.html"))
    assert len(pages) == 16 and len(list((index.parent / "figures").glob("*.png"))) == 16
    picked = tmp_path / "runs" / "t2_1"
    index = build_report(tmp_path / "runs", count_params=False, runs=[picked])
    assert any("t2_1" in p.read_text() for p in (index.parent / "runs").glob("*.html"))
    assert len(list((index.parent / "runs").glob("*.html"))) in (16, 17)  # (it may be its group's best)
    index = build_report(tmp_path / "runs", count_params=False, pages="none")
    assert not list((index.parent / "runs").glob("*.html")) and "0 run pages written" in index.read_text()
    assert len(list((index.parent / "groups").glob("*.html"))) == 16


def test_the_index_is_written_before_any_run_page(tmp_path):
    from report_sweep import make_runs

    make_runs(tmp_path / "runs", 8)
    seen = {}

    def on_index(path):
        seen["index"] = path.read_text()
        seen["pages"] = list((path.parent / "runs").glob("*.html"))

    index = build_report(tmp_path / "runs", count_params=False, on_index=on_index)
    assert seen["pages"] == [] and "run pages being written (0 of 8)" in seen["index"]
    assert "8 run pages written" in index.read_text()


def test_report_stays_within_its_size_budget(sweep):
    root, _, index, output = sweep
    n = len(_runs(root))
    assert index.stat().st_size <= index_budget(n)
    pages = n - 1  # every group's best run (the unfinished one shares its group)
    assert report_size(index) <= report_budget(index) == size_budget(pages, n_analysis_figures=1, n_listed=n)
    assert size_budget(100) == 10_000_000 and index_budget(100) == 1_000_000
    assert f"for {n} runs, {pages} run pages" in output and "budget" in output
    assert not re.search(r'(src|href)="(https?:)?//', index.read_text())  # nothing fetched when opened
    figures = list((index.parent / "figures").glob("*.png"))
    assert len(figures) == pages + 1 and all(f.stat().st_size < 100_000 for f in figures)


def test_odd_names_are_drawn_and_escaped(sweep):
    root, roles, index, _ = sweep
    page = next(p for p in (index.parent / "runs").glob("*.html") if "Odd$set$" in p.read_text())
    text = page.read_text()
    assert html.escape(f"odd/{WEIRD}") in text and "<b>&" not in text
    assert re.search(r'<img loading="lazy" src="../figures/[^"]+_accuracy-per-step.png"', text)  # the chart was drawn
    assert "x$\\frac$y" in text


def test_geo_runs_and_their_figures_are_in(sweep):
    _, roles, index, _ = sweep
    page = next(p for p in (index.parent / "runs").glob("*MoGE*.html")).read_text()
    assert "Routing frequency (top-1 expert per image)" in page and "_routing_frequency.png" in page
    assert ", ".join(GEO[5:]) in page and "worst test domain" in page


def test_analyze_says_which_runs_it_could_not_analyse_and_why(tmp_path):
    from dgmoe.cli.report import command

    write_run(tmp_path / "no_config", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [0])
    (tmp_path / "no_config" / "config.json").unlink()
    write_run(tmp_path / "no_weights", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [1])
    write_run(tmp_path / "training", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [2], done=False)
    res = CliRunner().invoke(command, [str(tmp_path), "--analyze", "--no-params"])
    assert res.exit_code == 0, res.output
    assert re.search(r"could not analyse \S*no_config: no config.json", res.output)
    assert re.search(r"could not analyse \S*no_weights: FileNotFoundError: .*no weights", res.output)
    assert re.search(r"could not analyse \S*training: not finished", res.output)
    assert "0 analysed, 0 already analysed, 3 could not be analysed" in res.output
    assert not any((tmp_path / name / "analysis").exists() for name in ("no_config", "no_weights", "training"))
    index = (tmp_path / "report" / "index.html").read_text()
    assert 'id="problems"' in index and index.count("Could not be analysed") == 3


def test_a_broken_run_is_listed_as_a_problem_and_the_others_are_reported(tmp_path):
    for env in range(len(PACS)):
        write_run(tmp_path / f"ok{env}", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [env])
    broken = write_run(tmp_path / "broken", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [0], trial_seed=1)
    lines = (broken / "results.jsonl").read_text().splitlines()
    (broken / "results.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    page = build_report(tmp_path, count_params=False).read_text()
    problems = page[page.index('id="problems"'):]
    assert "broken" in problems and "not valid JSON" in problems
    assert page.count("+/- 0.0") >= 4  # the results tables of the four readable runs are there
    assert "Records could not be read" not in page


def test_report_into_an_html_file_keeps_its_pages_beside_it(tmp_path):
    write_run(tmp_path / "runs" / "a", "PACS", PACS, "ERM", "vit_tiny_patch16_224", [0])
    index = build_report(tmp_path / "runs", tmp_path / "out" / "sweep.html", count_params=False)
    assert index == tmp_path / "out" / "sweep.html"
    pages = list((tmp_path / "out" / "sweep_files" / "runs").glob("*.html"))
    assert len(pages) == 1 and 'href="sweep_files/groups/' in index.read_text()
    group = next((tmp_path / "out" / "sweep_files" / "groups").glob("*.html")).read_text()
    assert 'href="../runs/' in group and '<a href="../../sweep.html">' in group
    assert '<a href="../../sweep.html">' in pages[0].read_text()
    index = build_report(tmp_path / "runs", tmp_path / "out" / "sweep.html", count_params=False)  # rebuilt in place
    assert len(list((tmp_path / "out" / "sweep_files" / "figures").glob("*.png"))) == 1


@pytest.mark.skipif(headless.chromium() is None, reason=headless.SKIP_REASON)
def test_overview_renders_at_a_fixed_width(sweep, tmp_path):
    _, _, index, _ = sweep
    facts, dom = headless.probe(index, tmp_path / "profile", width=1280)
    assert facts["scrollWidth"] <= 1280 and facts["mainWidth"] == 1100  # wide included tables scroll inside
    assert facts["images"] == []  # the overview loads no figure
    assert "Contents" in dom and "Run index" in dom and "Model selection: training-domain validation set" in dom
    shot = headless.screenshot(index, tmp_path / "index.png", tmp_path / "profile", 1280, 1600)
    assert shot.std() > 10 and (shot < 128).mean() > 0.005  # text and tables, not a blank page
    assert (shot[:, 1200:] > 250).all()  # nothing beyond the page's width


@pytest.mark.skipif(headless.chromium() is None, reason=headless.SKIP_REASON)
def test_run_page_shows_its_figure_with_title_and_legend(sweep, tmp_path):
    _, roles, index, _ = sweep
    page = next(p for p in (index.parent / "runs").glob("*MoGE*.html"))
    facts, dom = headless.probe(page, tmp_path / "profile", width=1280, height=1400)
    assert facts["scrollWidth"] <= 1280 and len(facts["images"]) == 2
    assert all(img["done"] for img in facts["images"]), facts["images"]
    assert "Accuracy per step" in dom and "Routing frequency (top-1 expert per image)" in dom
    on_screen = [img for img in facts["images"] if img["y"] + img["h"] <= 1400]
    shown = headless.shown_figures(page, on_screen, tmp_path / "run.png", tmp_path / "profile", 1280, 1400)
    for img, similarity in zip(on_screen, shown):  # the figure's own pixels, not a blank box
        assert similarity > 0.9, (img["alt"], similarity)


def test_analyze_gives_moge_runs_the_geo_routing_analysis_and_the_report_shows_it(tmp_path):
    """A real (tiny) MoGE run on GeoMNIST: `--analyze` dispatches it to `dgmoe.analysis.geo`."""
    import dgmoe.algorithms.moge  # noqa: F401
    from dgmoe.cli.report import command
    from dgmoe.data.geo.geomnist import geo_domains
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.trainer import train

    _, test_envs = geo_domains()
    run = tmp_path / "runs" / "MoGE_seed0"
    train(RunConfig.from_flat(dataset="GeoMNIST", test_envs=tuple(test_envs), model="moge_tiny_patch16_224",
                              algorithm="MoGE", output_dir=str(run), steps=2, checkpoint_freq=1, n_per_domain=10,
                              patch_size=7, hparams={"lr": 1e-3, "batch_size": 4, "drop_path_rate": 0.0},
                              num_threads=1, progress="none",
                              model_kwargs={"embed_dim": 16, "depth": 4, "num_heads": 2}))
    res = CliRunner().invoke(command, [str(tmp_path / "runs"), "--analyze", "--no-params"])
    assert res.exit_code == 0, res.output
    assert f"analysed {run}" in res.output and not list(run.glob(".analysis*"))
    page = next((tmp_path / "runs" / "report" / "runs").glob("*.html")).read_text()
    for caption in ("Discovered domains on the map (top-1 expert)", "Routing frequency (top-1 expert per image)",
                    "Forced-expert accuracy"):
        assert f"<figcaption>{caption}</figcaption>" in page


def test_cli_writes_the_pages_of_the_runs_it_is_given(tmp_path, cli):
    from report_sweep import make_runs

    runs = make_runs(tmp_path / "runs", 8)
    result = cli("report", tmp_path / "runs", "--no-params", "--pages", "none", "--run", runs[3], runs[5])
    assert result.exit_code == 0, result.output
    pages = [p.read_text() for p in (tmp_path / "runs" / "report" / "runs").glob("*.html")]
    assert len(pages) == 2 and all(any(r.name in p for p in pages) for r in (runs[3], runs[5]))
    assert ", 2 run pages and" in result.output
    outside = cli("report", tmp_path / "runs", "--run", tmp_path)
    assert outside.exit_code == 2 and "is not a run folder under" in outside.output
