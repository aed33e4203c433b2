"""`dgmoe results DIR --recipe NAME` on fake finished sweeps: the paper's number, the obtained one (computed by
dgmoe's own selection and table code) and their difference, one table per dataset, rows the recipe's."""
import json

from recipe_sweep import write_run
from recipe_tables import comparison_row

from dgmoe.data.catalogue import get_spec

PACS = get_spec("PACS").domains
DOMAINNET = get_spec("DomainNet").domains
FMOW = get_spec("FMoW").domains


def test_domainbed_table_paper_vs_obtained(cli, tmp_path):
    part = tmp_path / "t1" / "vit-gmoe"
    for trial in range(3):
        for env in range(4):
            write_run(part / f"gmoe_{trial}_{env}", "PACS", PACS, "ERM", "gmoe_small_patch16_224", [env],
                      {env: 0.87 + 0.01 * trial}, trial_seed=trial)
    write_run(part / "vit_0_0", "PACS", PACS, "ERM", "vit_small_patch16_224", [0], {0: 0.80})
    result = cli("results", tmp_path / "t1", "--recipe", "gmoe-table1")
    assert result.exit_code == 0, result.output
    gmoe = comparison_row(result.output, "PACS", "GMoE-S/16")
    # trial averages 87, 88, 89: mean 88.0, SE std/sqrt(3) = 0.47; GMoE Table 1 prints 88.1 +/- 0.1
    assert gmoe == {"": "", "Row": "GMoE-S/16", "paper": "88.1 +/- 0.1", "obtained": "88.0 +/- 0.5", "diff": "-0.1"}
    vit = comparison_row(result.output, "PACS", "ERM (ViT-S/16)")
    assert (vit["paper"], vit["obtained"], vit["diff"]) == ("86.2 +/- 0.1", "80.0 +/- 0.0", "-6.2")
    assert comparison_row(result.output, "PACS", "MIRO *")["obtained"] == "X"  # not run yet
    assert comparison_row(result.output, "VLCS", "GMoE-S/16")["obtained"] == "X"
    assert "training-domain validation" in result.output
    assert (tmp_path / "t1" / "results_recipe.md").read_text() in result.output


def test_leave_one_domain_out_column(cli, tmp_path):
    """GMoE Table 9 has a train-val and a lodo column for DomainNet; lodo needs the pair runs."""
    part = tmp_path / "t9" / "vit-gmoe-15k"
    for env in range(6):
        write_run(part / f"single_{env}", "DomainNet", DOMAINNET, "ERM", "gmoe_small_patch16_224", [env],
                  {env: 0.48})
        for other in range(env + 1, 6):
            write_run(part / f"pair_{env}_{other}", "DomainNet", DOMAINNET, "ERM", "gmoe_small_patch16_224",
                      [env, other], {env: 0.48, other: 0.5})
    result = cli("results", tmp_path / "t9", "--recipe", "gmoe-table9", "--no-save")
    assert result.exit_code == 0, result.output
    cells = comparison_row(result.output, "DomainNet", "GMoE-S/16 (15K)")
    assert (cells["avg: paper"], cells["avg: obtained"], cells["avg: diff"]) == ("48.7 +/- 0.2", "48.0 +/- 0.0",
                                                                                "-0.7")
    assert (cells["avg (lodo): paper"], cells["avg (lodo): obtained"]) == ("48.4 +/- 0.3", "48.0 +/- 0.0")
    assert comparison_row(result.output, "DomainNet", "GMoE-S/16 (5K)")["avg: obtained"] == "X"  # another part
    assert not (tmp_path / "t9" / "results_recipe.md").exists()


def test_single_source_table_with_improvements(cli, tmp_path):
    """GMoE Table 3: trained on painting; OOD on the other domains' validation splits; gains over ResNet50."""
    painting = DOMAINNET.index("painting")
    held_out = [e for e in range(6) if e != painting]
    write_run(tmp_path / "t3" / "resnet50" / "r", "DomainNet", DOMAINNET, "ERM", "resnet50", held_out,
              {**{e: 0.30 for e in held_out}, painting: 0.60})
    write_run(tmp_path / "t3" / "vit-gmoe" / "g", "DomainNet", DOMAINNET, "ERM", "gmoe_small_patch16_224", held_out,
              {**{e: 0.45 for e in held_out}, painting: 0.69})
    result = cli("results", tmp_path / "t3", "--recipe", "gmoe-table3", "--no-save")
    assert result.exit_code == 0, result.output
    gmoe = comparison_row(result.output, "DomainNet: trained on painting", "GMoE-S/16")
    assert (gmoe["clipart: paper"], gmoe["clipart: obtained"], gmoe["clipart: diff"]) == ("43.5", "45.0", "+1.5")
    assert (gmoe["painting: paper"], gmoe["painting: obtained"]) == ("69.3", "69.0")  # IID: painting's out split
    assert (gmoe["IID Imp.: paper"], gmoe["IID Imp.: obtained"]) == ("10.5", "15.0")  # (69 - 60) / 60
    assert (gmoe["OOD Imp.: paper"], gmoe["OOD Imp.: obtained"]) == ("42.3", "50.0")  # (45 - 30) / 30
    assert comparison_row(result.output, "DomainNet: trained on painting", "ViT-S/16")["clipart: obtained"] == "X"


def test_wilds_table_worst_group_selection(cli, tmp_path):
    test = FMOW.index("test")
    write_run(tmp_path / "t1a" / "moge" / "m", "FMoW", FMOW, "MoGE", "moge_tiny_patch16_224", [5, 6, 7, 8], {},
              wilds={"acc_avg": 0.55, "acc_worst_group": 0.41}, val_env=FMOW.index("val"))
    assert test == 8
    result = cli("results", tmp_path / "t1a", "--recipe", "moge-table1a", "--no-save")
    assert result.exit_code == 0, result.output
    moge = comparison_row(result.output, "FMoW", "MoGE")
    assert (moge["test acc_worst_group: paper"], moge["test acc_worst_group: obtained"],
            moge["test acc_worst_group: diff"]) == ("40.56 +/- 2.35", "41.00 +/- 0.00", "+0.44")  # as printed
    assert (moge["test acc_avg: paper"], moge["test acc_avg: obtained"]) == ("54.98 +/- 0.38", "55.00 +/- 0.00")
    se_row = comparison_row(result.output, "FMoW", "MoGE-SE")
    assert se_row["test acc_worst_group: obtained"] == "not run"
    assert "Not run by dgmoe: Per Region Models:" in result.output


def test_cost_table_as_ratios(cli, tmp_path):
    out = tmp_path / "t4"
    out.mkdir()
    (out / "recipe.json").write_text(json.dumps({"recipe": "sfmoe-table4", "scale": "paper"}))
    (out / "cost.json").write_text(json.dumps({"rows": {
        "ERM": {"step_time_s": 0.5, "memory_gb": 10.0}, "Fish": {"step_time_s": 1.5, "memory_gb": 4.0}}}))
    result = cli("results", out, "--recipe", "sfmoe-table4", "--no-save")
    assert result.exit_code == 0, result.output
    fish = comparison_row(result.output, "Table 4", "Fish")
    assert (fish["step time / ERM: paper"], fish["step time / ERM: obtained"]) == ("2.64", "3.00")  # 1.56 / 0.59
    assert comparison_row(result.output, "Table 4", "SWAD")["memory / ERM: obtained"] == "X"


def test_recipe_results_refuse_other_options_and_other_recipes(cli, tmp_path):
    (tmp_path / "recipe.json").write_text(json.dumps({"recipe": "gmoe-table3", "scale": "smoke"}))
    result = cli("results", tmp_path, "--recipe", "gmoe-table1")
    assert result.exit_code == 2 and "holds recipe 'gmoe-table3', not 'gmoe-table1'" in result.output
    result = cli("results", tmp_path, "--recipe", "gmoe-table3", "--selection", "loo")
    assert result.exit_code == 2 and "--recipe takes its selection" in result.output


def test_wilds_f1_printed_as_a_fraction(cli, tmp_path):
    domains = get_spec("iWildCam").domains
    write_run(tmp_path / "t1c" / "vit" / "e", "iWildCam", domains, "ERM", "vit_small_patch16_224", [1, 2, 3, 4], {},
              wilds={"acc_avg": 0.7, "acc_worst_group": 0.1, "f1_macro": 0.47}, val_env=domains.index("val"))
    result = cli("results", tmp_path / "t1c", "--recipe", "moge-table1c", "--no-save")
    assert result.exit_code == 0, result.output
    erm = comparison_row(result.output, "iWildCam", "ERM")
    assert (erm["id_test f1_macro: paper"], erm["id_test f1_macro: obtained"], erm["id_test f1_macro: diff"]) == (
        "0.473", "0.470 +/- 0.000", "-0.003")
    assert comparison_row(result.output, "iWildCam", "GroupDRO")["test f1_macro: obtained"] == "not run"


def test_foundation_table_beside_dgmoe_baselines_and_quoted_rows(cli, tmp_path):
    """The foundation recipe: a row dgmoe runs (paper | obtained | diff), a baseline dgmoe adds (no published number:
    obtained only) and a row it cannot run (zero-shot CLIP needs the text tower)."""
    clip = "vit_base_patch16_clip_quickgelu_224"
    for env in range(4):  # the adapter and the linear probe run the same tower, each in its part's folder
        write_run(tmp_path / "f" / "clip-adapter" / f"a{env}", "PACS", PACS, "ERM", clip, [env], {env: 0.95})
        write_run(tmp_path / "f" / "clip-linear" / f"l{env}", "PACS", PACS, "ERM", clip, [env], {env: 0.90})
    result = cli("results", tmp_path / "f", "--recipe", "foundation-domainbed", "--no-save")
    assert result.exit_code == 0, result.output
    adapter = comparison_row(result.output, "PACS", "CLIP-Adapter (ViT-B/16) *")
    assert (adapter["paper"], adapter["obtained"], adapter["diff"]) == ("96.4", "95.0 +/- 0.0", "-1.4")
    linear = comparison_row(result.output, "PACS", "linear probe (CLIP ViT-B/16) +")
    assert (linear["paper"], linear["obtained"], linear["diff"]) == ("-", "90.0 +/- 0.0", "")
    assert comparison_row(result.output, "PACS", "full fine-tune (DINOv2 ViT-B/14) +")["obtained"] == "X"
    assert comparison_row(result.output, "PACS", "zero-shot CLIP (ViT-B/16) *")["obtained"] == "not run"
    assert comparison_row(result.output, "VLCS", "MoA (OpenCLIP ViT-B/16) *")["paper"] == "83.1 +/- 0.3"
    assert "+: a row dgmoe adds" in result.output and "text tower" in result.output
