"""`--eval-sample N`: a fixed, seeded sample per split at the intermediate checkpoints, every image at the last,
the records saying which; DomainBed's full evaluation stays the default (its records unchanged)."""
import numpy as np

from dgmoe.engine.config import RunConfig
from dgmoe.engine.evaluate import sampled_splits
from dgmoe.engine.trainer import train

BASE = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, steps=3,
            checkpoint_freq=1, n_per_domain=40, progress="none", num_threads=1)


def test_the_sample_is_fixed_seeded_and_within_each_split():
    splits = [(np.arange(0, 30), np.arange(30, 40)), (np.arange(40, 42), np.arange(42, 50))]
    a, uda_a = sampled_splits(splits, {1: np.arange(50, 60)}, 4, seed=0)
    b, uda_b = sampled_splits(splits, {1: np.arange(50, 60)}, 4, seed=0)
    assert all((x == y).all() for pa, pb in zip(a, b) for x, y in zip(pa, pb)) and (uda_a[1] == uda_b[1]).all()
    assert [len(x) for pair in a for x in pair] == [4, 4, 2, 4]  # a split smaller than the sample stays whole
    assert set(a[0][0]) <= set(range(30)) and list(a[0][0]) == sorted(a[0][0])
    other, _ = sampled_splits(splits, {}, 4, seed=1)
    assert not (other[0][0] == a[0][0]).all()


def test_intermediate_checkpoints_evaluate_the_sample_and_the_last_everything(tmp_path):
    full = train(RunConfig.from_flat(**BASE, output_dir=str(tmp_path / "full")))
    quick = train(RunConfig.from_flat(**BASE, eval_sample=4, output_dir=str(tmp_path / "quick")))
    assert "eval_sample" not in full.records[0]  # the default: DomainBed's records
    assert [r["eval_sample"] for r in quick.records] == [4, 4, None]
    for record in quick.records[:-1]:  # 32 'in' images per domain, 4 evaluated: accuracies in quarters
        assert all(record[f"env{i}_in_acc"] * 4 == round(record[f"env{i}_in_acc"] * 4) for i in range(6))
    keys = [k for k in full.records[-1] if k.endswith(("_acc", "_loss"))]
    assert {k: quick.records[-1][k] for k in keys} == {k: full.records[-1][k] for k in keys}  # the same training
    assert RunConfig.from_flat(**BASE, eval_sample=4).identity_hash() != RunConfig.from_flat(**BASE).identity_hash()


def test_the_flag_is_on_the_command_line(cli):
    result = cli("train", "--eval-sample", "256", "--print-config")
    assert result.exit_code == 0 and '"eval_sample": 256' in result.output
    assert cli("train", "--eval-sample", "0", "--output-dir", "x").exit_code == 2
