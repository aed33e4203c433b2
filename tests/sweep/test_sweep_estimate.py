"""The study cost estimator: hand-computed job times, DomainBed checkpoint counts, LPT schedule."""
import pytest
from click.testing import CliRunner
from md_tables import table_rows

from dgmoe.cli.sweep import command as sweep_cli
from dgmoe.engine.hparams import run_hparams
from dgmoe.sweep.estimate import (
    GMOE_STUDY,
    StudyDataset,
    batch_per_domain,
    estimate_study,
    makespan,
    n_evaluations,
)


def test_n_evaluations_counts_domainbed_checkpoints():
    assert n_evaluations(5000, 300) == 18  # 0, 300, ..., 4800 and the last step 4999
    assert n_evaluations(5001, 300) == 18  # 0, ..., 4800 and 5000
    assert n_evaluations(15001, 1000) == 16  # 0, ..., 15000
    assert n_evaluations(15000, 1000) == 16
    assert n_evaluations(10, 5) == 3  # 0, 5, 9
    assert n_evaluations(10, 10) == 2


def test_makespan_is_lpt():
    assert makespan([3, 3, 2, 2, 2], 2) == 7  # LPT's textbook miss (optimum 6)
    assert makespan([5, 1, 1], 8) == 5
    assert makespan([1, 2, 3], 1) == 6
    with pytest.raises(ValueError):
        makespan([1], 0)


def test_batch_per_domain_matches_the_runs_hparams():
    for hp, trial in [(0, 0), (3, 1), (7, 2)]:
        expected = run_hparams("ERM", "PACS", "gmoe_small_patch16_224", hp, trial)["batch_size"]
        assert batch_per_domain("PACS", "gmoe_small_patch16_224", hp, trial) == expected


def test_hand_computed_study():
    toy = StudyDataset("Toy", n_domains=3, n_images=1000, steps=100, checkpoint_freq=50)
    est = estimate_study({"vit_tiny_patch16_224": 1.0}, eval_time_s={"vit_tiny_patch16_224": 0.5}, ref_images=32,
                         datasets=[toy], n_hparams=1, n_trials=1, job_overhead_s=10.0, gpus=(1, 2))
    # per job: 10 + 100 steps * 1.0 s * (32 * 2 domains / 32) + 3 evals * 0.5 s * 1000 / 32
    per_job = 10 + 200 + 46.875
    assert est.total_jobs == 3
    assert est.total_gpu_hours == pytest.approx(3 * per_job / 3600)
    assert est.longest_job_h == pytest.approx(per_job / 3600)
    assert est.wall_clock_h[2] == pytest.approx(2 * per_job / 3600)
    assert est.rows[0]["eval_share"] == pytest.approx(46.875 / per_job)
    pairs = estimate_study({"vit_tiny_patch16_224": 1.0}, eval_time_s={"vit_tiny_patch16_224": 0.5}, ref_images=32,
                           datasets=[toy], n_hparams=1, n_trials=1, job_overhead_s=10.0, single_test_envs=False)
    # 3 pairs, each training on 1 domain: 10 + 100 + 46.875
    assert pairs.total_gpu_hours == pytest.approx((3 * per_job + 3 * 156.875) / 3600)


def test_gmoe_study_job_counts_and_algorithm_cost():
    est = estimate_study({"vit_small_patch16_224": 1.0, "gmoe_small_patch16_224": 1.0}, n_trials=3)
    assert [d.name for d in GMOE_STUDY] == ["PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet"]
    assert est.total_jobs == (4 * 4 + 6) * 2 * 3
    fish = estimate_study({"vit_tiny_patch16_224": 1.0}, algorithms=["Fish"], job_overhead_s=0, eval_fraction=0)
    erm = estimate_study({"vit_tiny_patch16_224": 1.0}, algorithms=["ERM"], job_overhead_s=0, eval_fraction=0)
    assert fish.total_gpu_hours / erm.total_gpu_hours == pytest.approx(2.79 / 1.01)
    with pytest.raises(ValueError, match="no step-time ratio"):
        estimate_study({"vit_tiny_patch16_224": 1.0}, algorithms=["NotAnAlgorithm"])
    with pytest.raises(ValueError, match="must be > 0"):
        estimate_study({"m": 0.0})


def test_cli_estimate():
    result = CliRunner().invoke(sweep_cli, ["estimate", "--step-time", "gmoe_small_patch16_224=0.98",
                                            "--gpus", "8"])
    assert result.exit_code == 0, result.output
    assert [r[:3] for r in table_rows(result.output) if r[0] == "**total**"] == [["**total**", "", "66"]]
    bad = CliRunner().invoke(sweep_cli, ["estimate", "--step-time", "gmoe=fast"])
    assert bad.exit_code != 0 and "expected NAME=SECONDS" in bad.output
