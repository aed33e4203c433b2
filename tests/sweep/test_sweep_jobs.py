"""The sweep grid: test-env sets, seeds, job ids, commands and the manifest (v2, and reading v1)."""
import json
import re
import sys

import pytest

from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError
from dgmoe.seeding import seed_hash
from dgmoe.sweep.config import SweepConfig
from dgmoe.sweep.jobs import (
    Job,
    LegacySweepError,
    build_jobs,
    check_sweep,
    count_domains,
    held_out_env_sets,
    read_manifest,
    shuffled,
    write_manifest,
)

GRID = ("datasets", "algorithms", "models", "output_dir", "n_hparams", "n_hparams_from", "n_trials",
        "single_test_envs", "only_test_envs")


def _cfg(tmp_path, **kw):
    """A PACS sweep; keyword arguments that are not grid settings are run settings of its base config."""
    grid = dict(datasets=("PACS",), algorithms=("ERM",), models=("vit_tiny_patch16_224",),
                output_dir=str(tmp_path / "sweep"), n_hparams=1, n_trials=1)
    run = {"data_dir": str(tmp_path / "data")}
    for key, value in kw.items():
        (grid if key in GRID else run)[key] = value
    return SweepConfig(**grid, base=RunConfig.from_flat(run))


def test_held_out_sets_are_domainbeds():
    assert held_out_env_sets(4) == [[0], [0, 1], [0, 2], [0, 3], [1], [1, 2], [1, 3], [2], [2, 3], [3]]
    assert held_out_env_sets(4, single_test_envs=True) == [[0], [1], [2], [3]]
    assert len(held_out_env_sets(6)) == 6 + 15
    assert held_out_env_sets(2) == [[0], [1]]  # a pair would leave no training domain
    with pytest.raises(ValueError, match=">= 2 domains"):
        held_out_env_sets(1)


def test_grid_size_and_order(tmp_path):
    cfg = _cfg(tmp_path, algorithms=("ERM", "IRM"), models=("vit_tiny_patch16_224", "gmoe_tiny_patch16_224"),
               n_hparams=3, n_hparams_from=2, n_trials=2)
    jobs = build_jobs(cfg, n_domains={"PACS": 4})
    assert len(jobs) == 2 * 2 * 2 * 10 * 3  # trials x algorithms x models x env sets x hparams
    first = jobs[0].config.flat()
    assert (first["trial_seed"], first["algorithm"], first["model"], first["test_envs"],
            first["hparams_seed"]) == (0, "ERM", "vit_tiny_patch16_224", [0], 2)
    assert [j.config.flat()["hparams_seed"] for j in jobs[:3]] == [2, 3, 4]
    assert len({j.job_id for j in jobs}) == len(jobs)


def test_seed_is_domainbeds_and_pairs_backbones(tmp_path):
    cfg = _cfg(tmp_path, models=("vit_tiny_patch16_224", "gmoe_tiny_patch16_224"))
    jobs = build_jobs(cfg, n_domains={"PACS": 4})
    a = jobs[0].config.flat()
    assert a["seed"] == seed_hash("PACS", "ERM", [0], 0, 0)
    # the same cell under another backbone gets the same seed (paired comparison) but another dir
    twin = next(j for j in jobs
                if j.config.model.name == "gmoe_tiny_patch16_224" and j.config.data.test_envs == (0,))
    assert twin.config.flat()["seed"] == a["seed"] and twin.job_id != jobs[0].job_id


def test_job_id_is_the_run_identity_hash_and_ignores_execution(tmp_path):
    one = build_jobs(_cfg(tmp_path), n_domains={"PACS": 4})
    assert one[0].job_id == one[0].config.identity_hash() and one[0].dir == tmp_path / "sweep" / one[0].job_id
    assert one[0].config.execution.output_dir == str(one[0].dir)
    for execution in ({"data_dir": "/elsewhere"}, {"device": "cuda", "num_workers": 4, "progress": "none"}):
        moved = build_jobs(_cfg(tmp_path, **execution), n_domains={"PACS": 4})
        assert [j.job_id for j in one] == [j.job_id for j in moved]
    for result_changing in ({"steps": 10}, {"n_per_domain": 8}, {"precision": "bf16"}, {"model_kwargs": {"depth": 6}}):
        other = build_jobs(_cfg(tmp_path, **result_changing), n_domains={"PACS": 4})
        assert one[0].job_id != other[0].job_id, result_changing


def test_hparams_json_is_normalised_before_hashing(tmp_path):
    a = build_jobs(_cfg(tmp_path, hparams='{"lr": 0.1, "batch_size": 8}'), n_domains={"PACS": 4})
    b = build_jobs(_cfg(tmp_path, hparams='{"batch_size":8,"lr":0.1}'), n_domains={"PACS": 4})
    assert a[0].job_id == b[0].job_id


def test_command_is_the_equivalent_train_command(tmp_path):
    from click.testing import CliRunner

    from dgmoe.cli.options import config_from_options
    from dgmoe.cli.train import command as train

    cfg = _cfg(tmp_path, steps=7, img_size=32, patch_size=4, hparams='{"lr": 0.1}', n_per_domain=16)
    job = next(j for j in build_jobs(cfg, n_domains={"PACS": 4}) if j.config.data.test_envs == (1, 3))
    cmd = job.command(("train",))
    assert cmd[:3] == ["train", "--dataset", "PACS"] and cmd[3:7] == ["--test-envs", "1", "--test-envs", "3"]
    flat = dict(zip(cmd[7::2], cmd[8::2]))
    assert flat["--output-dir"] == str(tmp_path / "sweep" / job.job_id)
    assert flat["--steps"] == "7" and flat["--img-size"] == "32" and flat["--n-per-domain"] == "16"
    assert json.loads(flat["--hparams"]) == {"lr": 0.1}
    assert "--checkpoint-freq" not in flat  # left to the dataset default
    assert job.command()[:4] == [sys.executable, "-m", "dgmoe", "train"]
    ctx = train.make_context("train", cmd[1:])  # `dgmoe train` parses it back into the same run
    assert config_from_options(ctx, ctx.params) == job.config
    assert CliRunner  # (imported for the parser's context machinery)


def test_bad_config_is_reported(tmp_path):
    with pytest.raises(UsageError, match="--hparams is not valid JSON"):
        _cfg(tmp_path, hparams="{lr: 1}")
    with pytest.raises(ValueError, match="--models"):
        _cfg(tmp_path, models=())
    with pytest.raises(ValueError, match="n-trials"):
        _cfg(tmp_path, n_trials=0)


def test_count_domains_from_catalogue_and_folders(tmp_path):
    assert count_domains("PACS", None) == 4 and count_domains("DomainNet", None) == 6
    for d in ("b", "a", "c"):  # ImageFolder: --data-dir is the dataset folder, domains are its folders
        (tmp_path / "MyDG" / d / "cls").mkdir(parents=True)
    (tmp_path / "MyDG" / "README.txt").write_text("not a domain")
    assert count_domains("ImageFolder", tmp_path / "MyDG") == 3
    with pytest.raises(ValueError, match="Did you mean: PACS"):
        count_domains("PCAS", tmp_path)


def test_no_data_dir_flag_without_data_dir(tmp_path):
    job = build_jobs(_cfg(tmp_path, data_dir=None), n_domains={"PACS": 4})[0]
    assert "--data-dir" not in job.command(("t",))


def test_shuffle_is_seeded(tmp_path):
    jobs = build_jobs(_cfg(tmp_path), n_domains={"PACS": 4})
    assert [j.job_id for j in shuffled(jobs, 1)] == [j.job_id for j in shuffled(jobs, 1)]
    assert sorted(j.job_id for j in shuffled(jobs, 1)) == sorted(j.job_id for j in jobs)


def test_manifest_is_a_union_over_launches(tmp_path):
    out = tmp_path / "sweep"
    a = build_jobs(_cfg(tmp_path), n_domains={"PACS": 4})
    b = build_jobs(_cfg(tmp_path, algorithms=("IRM",)), n_domains={"PACS": 4})
    write_manifest(a, out)
    write_manifest(b, out)
    back = read_manifest(out)
    assert sorted(j.job_id for j in back) == sorted(j.job_id for j in a + b)
    assert isinstance(back[0], Job) and back[0].dir.parent == out
    with pytest.raises(FileNotFoundError, match="not a sweep directory"):
        read_manifest(tmp_path / "nothing")


def test_legacy_manifest_is_read_and_refuses_a_launch(tmp_path):
    """A sweep folder of dgmoe 0.1 (manifest version 1: flat args, another hash) stays readable by status and
    results; launching into it fails with a message saying what to do, before anything is written."""
    out = tmp_path / "old"
    out.mkdir()
    args = {"dataset": "PACS", "algorithm": "ERM", "model": "vit_tiny_patch16_224", "test_envs": [0],
            "hparams_seed": 0, "trial_seed": 0, "seed": 5, "steps": None, "checkpoint_freq": None,
            "hparams": '{"lr": 0.1}', "img_size": None, "patch_size": None, "holdout_fraction": None,
            "train_args": ["--n-per-domain", "8"]}
    (out / "sweep.json").write_text(json.dumps({"version": 1, "jobs": {"a" * 32: {
        "args": args, "data_dir": "/data", "exec_args": [], "command": ["dgmoe", "train"]}}}))
    (job,) = read_manifest(out)
    assert job.job_id == "a" * 32 and job.dir == out / ("a" * 32)
    assert job.describe() == "PACS ERM vit_tiny_patch16_224 test_envs=0 hparams_seed=0 trial=0"
    assert job.config.algorithm.hparams == {"lr": 0.1} and job.config.execution.data_dir == "/data"
    before = (out / "sweep.json").read_text()
    with pytest.raises(LegacySweepError, match="dgmoe < 0.2 .* new --output-dir"):
        write_manifest(build_jobs(_cfg(tmp_path, output_dir=str(out)), n_domains={"PACS": 4}), out)
    assert (out / "sweep.json").read_text() == before


@pytest.mark.parametrize("field, value, message", [
    ("algorithms", ("ERN",), "--algorithms: unknown algorithm 'ERN'. Did you mean: ERM"),
    ("models", ("gmoe_smal_patch16_224",), "--models: unknown model"),
    ("datasets", ("PCAS",), "--datasets: unknown dataset 'PCAS'"),
    ("hparams", '{"learning_rate": 1}', "unknown hyperparameter 'learning_rate'"),
    ("model_kwargs", {"depth": -1}, "--models vit_tiny_patch16_224 cannot be built"),
])
def test_check_sweep_rejects_unknown_names_before_launch(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_sweep(_cfg(tmp_path, **{field: value}))
    check_sweep(_cfg(tmp_path, device="cuda", num_workers=4))  # a valid grid passes


def test_job_id_hashes_only_the_settings_that_differ_from_their_defaults():
    """So a later dgmoe that adds a setting (at its default) keeps every existing job id."""
    import hashlib

    def md5(obj):
        return hashlib.md5(json.dumps(obj, sort_keys=True).encode()).hexdigest()

    assert RunConfig().identity_hash() == md5({})
    cfg = RunConfig.from_flat(dataset="PACS", steps=5, holdout_fraction=0.2, device="cuda")  # 0.2 is the default
    assert cfg.identity_hash() == md5({"data": {"dataset": "PACS"}, "training": {"steps": 5}})


def test_check_sweep_describes_the_models_with_their_peft_mode(tmp_path):
    """Adapter experts add the balance-loss weight: a sweep may set it for a dense backbone."""
    check_sweep(_cfg(tmp_path, peft="adapter_experts", hparams='{"moe_aux_weight": 0.1}'))
    with pytest.raises(ValueError, match="unknown hyperparameter 'moe_aux_weight'"):
        check_sweep(_cfg(tmp_path, peft="lora", hparams='{"moe_aux_weight": 0.1}'))
