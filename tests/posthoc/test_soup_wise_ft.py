"""`dgmoe soup --method wise-ft`: the zero-shot and a fine-tuned run interpolated over an alpha grid (Wortsman
et al., WiSE-FT, CVPR 2022, Eq. 1); at alpha 0 the soup is the zero-shot run and at 1 the fine-tuned run, weights
and every recorded accuracy and loss alike; alpha is chosen on training-domain validation; `results` lists the
curve; bad flags are one-line errors."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from shift_fixtures import write_pacs_oop

from dgmoe.cli import run as cli
from dgmoe.engine.io import read_jsonl
from dgmoe.posthoc.wise_ft import interpolate

TINY = ("--model", "vit_micro_patch7_28", "--img-size", "28", "--checkpoint-freq", "1", "--seed", "3",
        "--hparams", '{"batch_size": 4}', "--progress", "none", "--num-threads", "1", "--dataset", "PACS",
        "--test-envs", "0")


@pytest.fixture(scope="module")
def wise(tmp_path_factory):
    root = tmp_path_factory.mktemp("wise")
    write_pacs_oop(root / "data")
    for name, steps, draw in (("zs", 1, 1), ("ft", 4, 0)):  # one initialisation (--seed 3); ft trained 3 steps more
        assert cli(["train", *TINY, "--steps", str(steps), "--hparams-seed", str(draw),
                    "--data-dir", str(root / "data"), "--output-dir", str(root / "runs" / name)]) == 0
    assert cli(["soup", str(root / "runs"), "--method", "wise-ft", "--zero-shot", str(root / "runs" / "zs"),
                "--alpha", "0,0.5,1", "--weights", "last"]) == 0
    return root / "runs"


def _soup(runs, prefix):
    (folder,) = [f for f in (runs / "soups").iterdir() if f.name.startswith(prefix + "_")]
    return folder, read_jsonl(folder / "results.jsonl")[0]


@pytest.mark.parametrize("alpha,run", [("0.0", "zs"), ("1.0", "ft")])
def test_ends_of_the_curve_are_the_two_runs_exactly(wise, alpha, run):
    folder, record = _soup(wise, f"wise-ft{alpha}")
    weights, own = load_file(str(folder / "model.safetensors")), load_file(str(wise / run / "model.safetensors"))
    assert weights.keys() == own.keys() and all(torch.equal(weights[k], own[k]) for k in own)
    last = read_jsonl(wise / run / "results.jsonl")[-1]
    keys = [k for k in last if k.startswith("env") and (k.endswith("_acc") or k.endswith("_loss"))]
    assert keys and all(record[k] == last[k] or (record[k] != record[k] and last[k] != last[k]) for k in keys)
    zs, ft = load_file(str(wise / "zs" / "model.safetensors")), load_file(str(wise / "ft" / "model.safetensors"))
    assert any(not torch.equal(zs[k], ft[k]) for k in zs)  # the two runs differ: the test can fail


def test_middle_of_the_curve_is_the_interpolation(wise):
    folder, record = _soup(wise, "wise-ft0.5")
    zs, ft = load_file(str(wise / "zs" / "model.safetensors")), load_file(str(wise / "ft" / "model.safetensors"))
    mid = load_file(str(folder / "model.safetensors"))
    for k in zs:
        if zs[k].is_floating_point():
            assert torch.equal(mid[k], ((zs[k].double() + ft[k].double()) / 2).to(zs[k].dtype)), k
    assert record["args"]["algorithm"] == "ERM (WiSE-FT alpha=0.5, last weights)"
    assert record["args"]["soup"]["alpha"] == 0.5


def test_alpha_is_chosen_on_validation_and_the_curve_is_tabulated(wise):
    folder, record = _soup(wise, "wise-ft")
    info = record["args"]["soup"]
    assert [c["alpha"] for c in info["curve"]] == [0.0, 0.5, 1.0]
    vals = [c["val_acc"] for c in info["curve"]]
    assert info["alpha"] == info["curve"][vals.index(max(vals))]["alpha"]  # the first best in grid order
    _, at = _soup(wise, f"wise-ft{info['alpha']:.1f}")
    assert all(record[k] == at[k] for k in at if k.startswith("env") and k.endswith("_acc"))
    from dgmoe.report.collect import load_records
    from dgmoe.report.results import results_tables

    table = results_tables(load_records(wise), "oracle")
    for row in ("ERM (WiSE-FT alpha=0, last weights)", "ERM (WiSE-FT alpha=0.5, last weights)",
                "ERM (WiSE-FT alpha=1, last weights)", "ERM (WiSE-FT, last weights)"):
        assert row in table


def test_interpolation_refuses_other_tensors():
    a = {"w": torch.ones(2)}
    with pytest.raises(Exception, match="different tensors"):
        interpolate(a, {"v": torch.ones(2)}, 0.5)


@pytest.mark.parametrize("args,message", [
    (("--method", "wise-ft"), "--method wise-ft and --zero-shot RUN_DIR go together"),
    (("--alpha", "0,1.5"), "mixing coefficients lie in [0, 1], got 1.5"),
])
def test_bad_flags_are_one_line_errors(wise, capsys, args, message):
    extra = () if "--method" in args else ("--method", "wise-ft", "--zero-shot", str(wise / "zs"))
    code = cli(["soup", str(wise), *args, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_a_zero_shot_run_without_partner_is_refused(wise, tmp_path, capsys):
    import shutil

    shutil.copytree(wise / "zs", tmp_path / "alone" / "zs")
    config = json.loads((tmp_path / "alone" / "zs" / "config.json").read_text())
    assert config  # a finished run folder
    code = cli(["soup", str(tmp_path / "alone"), "--method", "wise-ft", "--zero-shot", str(tmp_path / "alone" / "zs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no fine-tuned run holds out its domains [0] of PACS" in err, err


def test_a_soup_is_kept_only_for_the_same_alpha_grid(wise):
    from dgmoe.posthoc.config import SoupConfig
    from dgmoe.posthoc.soup import make_soups

    options = SoupConfig(methods=("wise-ft",), zero_shot=str(wise / "zs"), which="last", alphas=(0.0, 0.5, 1.0))
    chosen = next(f for f in (wise / "soups").iterdir() if f.name.startswith("wise-ft_"))
    before = (chosen / "results.jsonl").stat().st_mtime_ns
    make_soups(wise, options=options)  # the same grid: every soup kept
    assert (chosen / "results.jsonl").stat().st_mtime_ns == before
    make_soups(wise, options=SoupConfig(methods=("wise-ft",), zero_shot=str(wise / "zs"), which="last",
                                         alphas=(0.0, 1.0)))  # another grid: the chosen soup is made again
    info = read_jsonl(chosen / "results.jsonl")[0]["args"]["soup"]
    assert [c["alpha"] for c in info["curve"]] == [0.0, 1.0]
