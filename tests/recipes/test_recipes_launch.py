"""`dgmoe recipe launch` checks every input before anything runs: a missing data folder or weights file is
named in one line each, the exit code is 2 and nothing is written."""
import json

import pytest

from dgmoe.recipes import get_recipe
from dgmoe.recipes.run import prepare


def _files(tmp_path):
    """Every file under tmp_path (to show that a refused launch wrote nothing)."""
    return sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))


def test_missing_data_dir_and_weights_are_named_one_line_each(cli, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "PACS").mkdir()  # present: not reported
    weights = tmp_path / "deit_small_patch16_224.safetensors"
    weights.write_bytes(b"x")  # present (read at training time, not here)
    before = _files(tmp_path)
    result = cli("recipe", "launch", "gmoe-table10", "--data-dir", data, "--pretrained", f"deit_small={weights}",
                 "--pretrained", f"resnet50={tmp_path / 'nope.pth'}", "--output-dir", tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    missing = [line for line in lines if line.startswith("missing: ")]
    assert [m.split(":")[1].strip() for m in missing] == [
        "data VLCS", "data OfficeHome", "data TerraIncognita", "data DomainNet", "weights resnet50"]
    assert any("terra_incognita" in m for m in missing) and any(str(tmp_path / "nope.pth") in m for m in missing)
    assert lines[-1] == "dgmoe: error: recipe gmoe-table10: 5 input(s) missing (listed above); nothing was launched"
    assert len(lines) == len(missing) + 1
    assert _files(tmp_path) == before


def test_missing_weights_not_given_and_wilds_metadata(cli, tmp_path):
    result = cli("recipe", "launch", "moge-table1b", "--data-dir", tmp_path, "--output-dir", tmp_path / "out")
    assert result.exit_code == 2
    missing = [line for line in result.output.splitlines() if line.startswith("missing: ")]
    assert len(missing) == 3
    assert "fmow_v1.1/rgb_metadata.csv" in missing[0]
    assert "weights deit_tiny: not given; pass --pretrained deit_tiny=FILE" in missing[1]
    assert "weights satclip: not given" in missing[2] and "satclip-resnet50-l10.ckpt" in missing[2]
    assert not (tmp_path / "out").exists()


def test_no_data_dir_at_all(cli, tmp_path):
    result = cli("recipe", "launch", "sfmoe-fig4", "--pretrained", tmp_path / "w.safetensors",
                 "--output-dir", tmp_path / "out")
    assert result.exit_code == 2
    missing = [line for line in result.output.splitlines() if line.startswith("missing: ")]
    assert [m.split(":")[1].strip() for m in missing] == ["data VLCS", "data PACS", "data OfficeHome",
                                                          "weights deit_small"]
    assert "needs a data dir (--data-dir)" in missing[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (("--pretrained", "x.pth"), "needs 2 kinds of weights (deit_small, resnet50)"),
    (("--pretrained", "vit=x.pth"), "expects weights deit_small, resnet50, not 'vit'"),
    (("--rows", "GMoE-S/32"), "--rows 'GMoE-S/32': recipe gmoe-table1 has rows"),
    (("--", "--steps", "3"), "--steps after `--` would change what the recipe computes"),
    (("--scale", "smoke", "--pretrained", "x.pth"), "--pretrained is for the paper scale; the smoke scale writes"),
])
def test_bad_launch_flags_fail_in_one_line(cli, tmp_path, args, message):
    result = cli("recipe", "launch", "gmoe-table1", "--output-dir", tmp_path / "out", *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_rows_need_only_their_inputs(cli, tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "deit_small_patch16_224.safetensors").write_bytes(b"x")
    result = cli("recipe", "launch", "gmoe-table1", "--rows", "GMoE-S/16", "--data-dir", tmp_path, "--pretrained",
                 weights, "--output-dir", tmp_path / "out")
    assert result.exit_code == 2
    missing = [line for line in result.output.splitlines() if line.startswith("missing: ")]
    assert len(missing) == 8 and all(m.startswith("missing: data ") for m in missing)  # no resnet50 weights asked


def test_dummy_launch_with_every_input(cli, tmp_path):
    data = tmp_path / "data"
    for folder in ("VLCS", "PACS", "office_home"):
        (data / folder).mkdir(parents=True)
    weights = tmp_path / "deit.safetensors"
    weights.write_bytes(b"x")
    before = _files(tmp_path)
    result = cli("recipe", "launch", "sfmoe-fig4", "--data-dir", data, "--pretrained", weights, "--launcher",
                 "dummy", "--n-hparams", "1", "--n-trials", "1", "--output-dir", tmp_path / "out", "--", "--device",
                 "cuda")
    assert result.exit_code == 0, result.output
    commands = [line for line in result.output.splitlines() if line.startswith("Dummy launcher: ")]
    assert len(commands) == 3 * (4 + 4 + 4)  # 3 layouts x (VLCS + PACS + OfficeHome held-out domains)
    assert all("--device cuda" in c and f"--pretrained {weights}" in c for c in commands)
    assert sum('"moe_layers": "[S]x12"' in c for c in commands) == 12
    assert _files(tmp_path) == before


def test_launch_records_the_recipe_and_refuses_another_in_its_folder(tmp_path):
    from dgmoe.errors import UsageError
    from dgmoe.recipes.run import read_manifest, write_manifest

    plan = prepare(get_recipe("gmoe-table3"), "smoke", tmp_path / "out")
    write_manifest(plan)
    manifest = read_manifest(tmp_path / "out")
    assert manifest["recipe"] == "gmoe-table3" and manifest["scale"] == "smoke"
    # (at the smoke scale ResNet-101's stand-in runs are ResNet-50's: trained once, in the first part)
    assert set(manifest["parts"]) == {"resnet50", "vit-gmoe"}
    other = prepare(get_recipe("gmoe-table12"), "smoke", tmp_path / "out")
    with pytest.raises(UsageError, match="holds recipe gmoe-table3"):
        write_manifest(other)
    assert json.loads((tmp_path / "out" / "recipe.json").read_text())["recipe"] == "gmoe-table3"


def test_smoke_scale_loads_dense_checkpoints_it_writes_at_launch(tmp_path):
    """Every smoke run of a part with weights loads its backbone's dense-twin checkpoint (MoGE and ERM+LE share
    the ViT-Tiny one); `prepare` writes none, the launch writes each once, and it loads into the run's model."""
    import dgmoe
    from dgmoe.data import get_dataset

    plan = prepare(get_recipe("moge-table1a"), "smoke", tmp_path / "out")
    paths = {c.path for c in plan.checkpoints}
    assert {c.model for c in plan.checkpoints} == {"vit_tiny_patch16_224", "vit_micro_patch7_28"}
    jobs = [j for part_jobs in plan.jobs.values() for j in part_jobs]
    assert {j.config.model.pretrained for j in jobs} == paths and not (tmp_path / "out").exists()
    assert [c.write() for c in plan.checkpoints] == [True, True]
    assert [c.write() for c in plan.checkpoints] == [False, False]  # once
    moge = next(j.config for j in jobs if j.config.model.name == "moge_tiny_patch16_224")
    data = get_dataset("GeoMNIST", None, None, n_per_domain=2)
    model = dgmoe.create_model(moge.model.name, num_classes=data.num_classes, img_size=data.input_shape[-1],
                               patch_size=moge.model.patch_size, pretrained=moge.model.pretrained, **moge.model.kwargs)
    assert "blocks.8.mlp.gamma_logit" in model.info.load_report.initialised
    assert model.info.load_report.resized == ["patch_embed.proj.weight", "pos_embed"]  # 224 px / 16 -> 28 px / 7


@pytest.mark.parametrize("name", ["gmoe-table1", "gmoe-table3", "gmoe-table11"])
def test_the_smoke_scale_trains_each_stand_in_configuration_once(name):
    plan = prepare(get_recipe(name), "smoke", "out")
    ids = [j.job_id for jobs in plan.jobs.values() for j in jobs]
    assert ids and len(ids) == len(set(ids))
    paper_parts = {p.name for p in get_recipe(name).parts}
    assert set(plan.jobs) <= paper_parts
