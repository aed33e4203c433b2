"""Every recipe end to end at the smoke scale: `dgmoe recipe launch NAME --scale smoke` through the local launcher
(real `dgmoe train` processes, each loading with --pretrained the dense checkpoint the launch wrote, as the paper's
runs load DeiT; the cost and synthetic tables in this process), then `dgmoe results DIR --recipe NAME` reports a
number for every row dgmoe runs. About 4 minutes on 2 CPU cores in all."""
import json

import pytest

from dgmoe.models.info import describe_model
from dgmoe.recipes import list_recipes
from dgmoe.recipes.plan import SMOKE, text_head


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list_recipes(), ids=lambda r: r.name)
def test_smoke_scale_end_to_end(recipe, cli, tmp_path):
    out = tmp_path / recipe.name
    result = cli("recipe", "launch", recipe.name, "--scale", "smoke", "--output-dir", out, "--max-workers", "2")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "recipe.json").read_text())["scale"] == "smoke"
    assert "failed" not in result.output
    weighted = {p.name for p in recipe.parts if p.pretrained and not text_head(p)}  # text heads: seeded towers
    for config in out.rglob("config.json"):  # every run of a part with weights loaded the smoke checkpoint
        build = json.loads(config.read_text())["model_build"]
        if config.relative_to(out).parts[0] in weighted:
            assert build["pretrained_load"].startswith(f"loaded {(out / SMOKE.weights_dir).absolute()}"), build
            if describe_model(build["name"], **build["kwargs"]).is_sparse:
                assert "copied dense FFN into experts" in build["pretrained_load"]
                assert "initialised, not in the checkpoint" in build["pretrained_load"]
    result = cli("results", out, "--recipe", recipe.name)
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith("| ") and not line.startswith("| Row")]
    runnable = [r for r in recipe.rows if not r.unavailable]
    assert len(table) == len(runnable)
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        obtained = cells[2::3] if recipe.kind in ("cost", "synthetic") else cells[2:]
        assert obtained and all(c not in ("X", "") for c in obtained), line
    assert (out / "results_recipe.md").is_file()
    # the same folder through the plain tables and the report of its parent (several parts may have trained
    # one stand-in configuration: a warning, and every table still printed)
    if recipe.kind != "domainbed":
        return
    plain = cli("results", out, "--no-save")
    assert plain.exit_code == 0 and "### Averages" in plain.output, plain.output
    report = cli("report", tmp_path, "--no-params", "--pages", "none")
    assert report.exit_code == 0, report.output
    assert 'class="problem"' not in (tmp_path / "report" / "index.html").read_text()
