"""Explicit held-out sets (`SweepConfig.test_env_sets`, e.g. single-source runs) and one launch over several
sweep folders (a recipe's parts), each with its manifest."""
import sys

import pytest

from dgmoe.engine.config import RunConfig
from dgmoe.sweep.config import LaunchConfig, SweepConfig
from dgmoe.sweep.jobs import build_jobs, read_manifest
from dgmoe.sweep.launchers import launch_sweep


def _cfg(tmp_path, name="sweep", **kw):
    return SweepConfig(datasets=("PACS",), algorithms=("ERM",), models=("vit_tiny_patch16_224",),
                       output_dir=str(tmp_path / name), base=RunConfig(), n_hparams=1, n_trials=1, **kw)


def test_explicit_sets_replace_singles_and_pairs(tmp_path):
    single_source = tuple(tuple(e for e in range(4) if e != s) for s in range(4))
    jobs = build_jobs(_cfg(tmp_path, test_env_sets=single_source))
    assert [j.config.data.test_envs for j in jobs] == list(single_source)
    wilds = build_jobs(SweepConfig(datasets=("FMoW",), algorithms=("ERM",), models=("vit_tiny_patch16_224",),
                                   output_dir=str(tmp_path / "f"), n_hparams=1, n_trials=1, test_env_sets=((0,),)))
    assert [j.config.data.test_envs for j in wilds] == [(5, 6, 7, 8)]  # WILDS keeps its evaluation splits


@pytest.mark.parametrize("sets, message", [(((0, 0),), "distinct"), (((),), "distinct"),
                                           (((0, 1, 2, 3),), "leave a training domain"),
                                           (((4,),), "does not fit PACS's 4 domains")])
def test_bad_sets_are_refused(tmp_path, sets, message):
    with pytest.raises(ValueError, match=message):
        build_jobs(_cfg(tmp_path, test_env_sets=sets))


def test_one_launch_over_several_sweep_folders(tmp_path):
    a = build_jobs(_cfg(tmp_path, "a", test_env_sets=((0,),)))
    b = build_jobs(_cfg(tmp_path, "b", test_env_sets=((1,), (2,))))
    report = launch_sweep(a + b, "dummy", echo=lambda s: None)
    assert report.launched == 3 and not (tmp_path / "a").exists()
    quick = LaunchConfig(train_command=(sys.executable, "-c", "pass"), max_workers=2)  # a run that does nothing
    report = launch_sweep(a + b, "local", quick, echo=lambda s: None)
    assert report.launched == 3 and len(report.outcomes) == 3
    assert [j.job_id for j in read_manifest(tmp_path / "a")] == [j.job_id for j in a]
    assert sorted(j.job_id for j in read_manifest(tmp_path / "b")) == sorted(j.job_id for j in b)
