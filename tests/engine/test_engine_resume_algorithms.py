"""Every stateful algorithm, killed between checkpoints and run again, ends exactly as an uninterrupted run.

"Stateful" is read from the algorithm itself: state beyond the network's weights (counters, moving averages,
extra networks, averaged copies) or more than one optimiser. The kill is an exception no handler catches,
raised from a sink after a training step that no checkpoint saved, so the resumed run must redo that step from
the last resume state (`test_engine_resume.py` shows a real SIGKILL leaves the same folder behind).
Warm-ups are set to switch on after the resume point, so a counter that is not restored changes the records.
"""
from __future__ import annotations

import pytest
import torch
from run_records import comparable_records
from safetensors.torch import load_file

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.engine.config import RunConfig
from dgmoe.engine.hparams import default_hparams
from dgmoe.engine.sinks import Sink
from dgmoe.engine.trainer import train
from dgmoe.models import create_model

STEPS, CHECKPOINT_FREQ, KILL_AFTER_STEP = 6, 2, 3  # checkpoints at 0, 2, 4, 5: step 3 is trained twice
SWITCH = 4  # every warm-up ends after the resume point (update 4)
WARM_UPS = dict(irm_penalty_anneal_iters=SWITCH, vrex_penalty_anneal_iters=SWITCH, penalty_anneal_iters=SWITCH,
                rdm_penalty_anneal_iters=SWITCH, ib_penalty_anneal_iters=SWITCH, eqrm_burnin_iters=SWITCH,
                sma_start_iter=SWITCH, ermpp_sma_start_iter=SWITCH, linear_steps=SWITCH, swad_n_converge=1,
                swad_n_tolerance=2, iters=1, d_steps_per_g=2)
GEO = {"MoGE", "D3G", "D3G_WRAP"}  # read lat/lon: trained on GeoMNIST


def backbone(name: str) -> tuple[str, dict]:
    if name == "MoGE":
        return "moge_tiny_patch16_224", {"img_size": 28, "patch_size": 7, "depth": 2, "embed_dim": 32,
                                         "num_heads": 2, "moe_layers": [1]}
    return "gmoe_micro_patch7_28", {"depth": 2, "embed_dim": 32, "num_heads": 2, "moe_layers": [1]}


def is_stateful(name: str) -> bool:
    model, kwargs = backbone(name)
    dataset = "GeoMNIST" if name in GEO else "RotatedMNIST"
    hparams = default_hparams(name, dataset, model)
    network = create_model(model, num_classes=3, **kwargs)
    algorithm = get_algorithm(name)(network, 3, 3, hparams)
    own_state = [k for k in algorithm.state_dict() if not k.startswith("network.")]
    return bool(own_state) or len(algorithm.optimizers()) > 1


#: CLIPood needs a text head: its resume is tested in tests/algorithms/test_algorithms_clipood.py
STATEFUL = [name for name in list_algorithms() if not get_algorithm(name).NEEDS_TEXT_HEAD and is_stateful(name)]


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the engine handles it."""


class KillAfter(Sink):
    def __init__(self, step: int):
        self.at = step

    def step(self, step: int, metrics: dict[str, float], train_seconds: float) -> None:
        if step == self.at:
            raise Killed


def config(name: str, out) -> RunConfig:
    model, kwargs = backbone(name)
    dataset = "GeoMNIST" if name in GEO else "RotatedMNIST"
    if dataset == "GeoMNIST":
        from dgmoe.data.geo.geomnist import geo_domains

        test_envs = tuple(geo_domains()[1])
    else:
        test_envs = (0,)
    known = default_hparams(name, dataset, model)
    hparams = {k: v for k, v in WARM_UPS.items() if k in known} | {"batch_size": 6}
    return RunConfig.from_flat(dataset=dataset, test_envs=test_envs, model=model, model_kwargs=kwargs,
                               algorithm=name, hparams=hparams, steps=STEPS, checkpoint_freq=CHECKPOINT_FREQ,
                               n_per_domain=16, seed=1, num_threads=1, keep_resume=True, progress="none",
                               output_dir=str(out))


def equal(a, b) -> bool:
    """Nested dicts, lists and tensors hold the same values."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(equal, a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


def test_the_stateful_list_holds_the_algorithms_with_their_own_state():
    assert {"ERMPlusPlus", "TRM", "ADRMX", "IB_IRM", "MTL", "SagNet", "GroupDRO", "SWAD"} <= set(STATEFUL)
    assert not {"ERM", "CORAL", "SD", "RSC"} & set(STATEFUL)


@pytest.mark.parametrize("name", STATEFUL)
def test_killed_between_checkpoints_then_resumed_equals_the_uninterrupted_run(name, tmp_path):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    train(config(name, reference))
    with pytest.raises(Killed):
        train(config(name, killed), sinks=[KillAfter(KILL_AFTER_STEP)])
    assert not (killed / "done").exists()
    assert [r["step"] for r in comparable_records(killed)] == [0, 2]
    train(config(name, killed))
    assert comparable_records(killed) == comparable_records(reference)
    for weights in ("model.safetensors", "best.safetensors"):
        a, b = load_file(str(reference / weights)), load_file(str(killed / weights))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), weights
    # the whole resume state (algorithm buffers and submodules, every optimiser) agrees too
    a, b = (torch.load(run / "resume.pt", weights_only=True) for run in (reference, killed))
    assert equal(a["algorithm"], b["algorithm"]) and equal(a["optimizers"], b["optimizers"])
