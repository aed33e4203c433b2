"""Bad input to a training run gets a specific error and nothing is written."""
import pytest

from dgmoe.data.errors import DatasetError
from dgmoe.engine.config import RunConfig
from dgmoe.engine.trainer import train
from dgmoe.registry import UnknownNameError

BASE = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", steps=1, checkpoint_freq=1, n_per_domain=20,
            progress="none")


@pytest.mark.parametrize("override,error,match", [
    ({"model": "gmoe_micro"}, UnknownNameError, "gmoe_micro_patch7_28"),
    ({"algorithm": "ERN"}, UnknownNameError, "ERM"),
    ({"dataset": "PAC"}, UnknownNameError, "PACS"),
    ({"test_envs": (9,)}, DatasetError, "out of range"),
    ({"dataset": "PACS", "data_dir": "/nonexistent/dir"}, DatasetError, "/nonexistent/dir"),
    ({"hparams": {"learning_rate": 1}}, ValueError, "learning_rate"),
    ({"pretrained": "/nonexistent/deit.pth"}, ValueError, "/nonexistent/deit.pth"),
])
def test_bad_input_is_refused_before_anything_is_written(tmp_path, override, error, match):
    out = tmp_path / "run"
    with pytest.raises(error, match=match):
        train(RunConfig.from_flat(**{**BASE, **override, "output_dir": str(out)}))
    assert not out.exists()


def test_algorithm_needing_several_domains_with_one_is_refused(tmp_path):
    from dgmoe.algorithms import ALGORITHMS

    multi = next((n for n in ALGORITHMS.names() if ALGORITHMS.get(n).MIN_TRAIN_DOMAINS > 1), None)
    if multi is None:
        pytest.skip("no registered algorithm needs several training domains")
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="training domains"):
        train(RunConfig.from_flat(**{**BASE, "algorithm": multi, "test_envs": (0, 1, 2, 3, 4), "output_dir": str(out)}))
    assert not out.exists()
