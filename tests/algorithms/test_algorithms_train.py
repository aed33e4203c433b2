"""Every algorithm x {ViT-tiny, GMoE-tiny} trains, checkpoints and resumes; bad input gets clear errors."""
import io
import math

import numpy as np
import pytest
import torch

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.algorithms.base import Algorithm
from dgmoe.algorithms.sma import EnsembleOfAverages
from dgmoe.data.base import Batch
from dgmoe.data.catalogue import dataset_hparams
from dgmoe.engine.hparams import base_hparams, default_hparams, hparam_specs, random_hparams
from dgmoe.models import create_model
from dgmoe.models.resnet import ResNet
from dgmoe.moe.auxiliary import sparse_layers

#: every registered algorithm that trains any backbone: a new one is in the matrix by default. FLYP and CLIPood need
#: CLIP's text head (tests/algorithms/test_algorithms_clipood.py, tests/engine/test_robust_ft_runs.py)
ALGORITHMS = [name for name in list_algorithms() if not get_algorithm(name).NEEDS_TEXT_HEAD]
BACKBONES = ["vit_tiny_patch16_224", "gmoe_tiny_patch16_224", "moge_tiny_patch16_224", "resnet50"]
NUM_CLASSES, NUM_DOMAINS = 3, 3
# Penalties switch on at update 1 so the few test updates cross every warm-up and optimiser reset.
FAST = dict(irm_penalty_anneal_iters=1, vrex_penalty_anneal_iters=1, penalty_anneal_iters=1,
            rdm_penalty_anneal_iters=1, sma_start_iter=1, swad_n_converge=1, swad_n_tolerance=2)
FAST.update(ib_penalty_anneal_iters=1, eqrm_burnin_iters=1)  # IB_ERM, IB_IRM, EQRM: cross the switch too
FAST.update(linear_steps=1, ermpp_sma_start_iter=2, iters=1, d_steps_per_g=2)  # ERM++, TRM, Transfer
VAL_LOSSES = [3.0, 2.0, 2.5, 9.0, 9.0]


def tiny(backbone, seed=0, peft=None):
    """The backbone family at toy size: 16 px, 2 blocks of width 32 (sparse block 1), or one Bottleneck per
    ResNet stage (BatchNorm: per-domain forwards are exercised); `peft`: a parameter-efficient ViT."""
    torch.manual_seed(seed)
    if backbone == "resnet50":
        return ResNet((1, 1, 1, 1), num_classes=NUM_CLASSES)
    extra = {"moe_layers": [1]} if backbone.startswith(("gmoe", "moge")) else {}
    return create_model(backbone, num_classes=NUM_CLASSES, img_size=16, patch_size=4, depth=2, embed_dim=32,
                        num_heads=2, peft=peft, **extra)


def compatible(name, backbone):
    """MoGE's losses need a MoGE network; CLIPood a text head (tested in test_algorithms_clipood.py); every other
    algorithm takes any backbone."""
    return (name == "MoGE") == backbone.startswith("moge") and not get_algorithm(name).NEEDS_TEXT_HEAD


MATRIX = [(n, b) for n in ALGORITHMS for b in BACKBONES if compatible(n, b)]


def backbone_for(name, preferred):
    return preferred if compatible(name, preferred) else next(b for b in BACKBONES if compatible(name, b))


def build(name, backbone, seed=0, num_domains=NUM_DOMAINS, peft=None, **overrides):
    hp = default_hparams(name, "PACS", backbone)
    hp.update({k: v for k, v in FAST.items() if k in hp}, **overrides)
    return get_algorithm(name)(tiny(backbone, seed, peft), NUM_CLASSES, num_domains, hp)


def minibatches(seed, n=NUM_DOMAINS, size=4):
    """Images, labels and a location per image (metadata that only MoGE reads)."""
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(size, 3, 16, 16, generator=g) + d, torch.randint(0, NUM_CLASSES, (size,), generator=g),
                  {"lat": torch.rand(size, generator=g) * 160 - 80, "lon": torch.rand(size, generator=g) * 340 - 170})
            for d in range(n)]


def train(alg, steps, start=0):
    outs = []
    for step in range(start, start + steps):
        torch.manual_seed(1000 + step)  # the same random draws (noise, dropout, mixup) for a resumed run
        np.random.seed(1000 + step)  # Mixup's lambda (numpy's generator, as DomainBed)
        outs.append(alg.update(minibatches(step), step))
        alg.on_checkpoint(step, VAL_LOSSES[step] if alg.NEEDS_VAL_LOSS else None)
    return outs


def predictions(alg, batch):
    """Eval-mode predictions from a fixed random stream (MTL's default, DomainBed's noise embedding, draws in
    `predict`), leaving the training stream as it was."""
    alg.eval()
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(7)
        out = alg.predict(batch.x, batch.meta)
    alg.train()
    return out


def save(alg) -> bytes:
    buf = io.BytesIO()
    torch.save({"model": alg.state_dict(), "optimizers": {k: o.state_dict() for k, o in alg.optimizers().items()}},
               buf)
    return buf.getvalue()


def load(alg, blob: bytes) -> None:
    state = torch.load(io.BytesIO(blob), weights_only=True)
    alg.load_state_dict(state["model"])
    for k, opt in alg.optimizers().items():
        opt.load_state_dict(state["optimizers"][k])


@pytest.mark.parametrize("name,backbone", MATRIX)
def test_trains_with_finite_losses_and_reloads_identically(name, backbone):
    alg = build(name, backbone)
    outs = train(alg, 3)
    for out in outs:
        assert out and all(math.isfinite(v) for v in out.values()), out
    if backbone.startswith(("gmoe", "moge")):
        assert any(o.get("loss_aux", 0.0) > 0 for o in outs), "MoE auxiliary loss never added"
    x = minibatches(99)[0]
    before = predictions(alg, x)
    assert before.shape == (4, NUM_CLASSES) and torch.isfinite(before).all()
    blob = save(alg)
    fresh = build(name, backbone, seed=1)
    assert not torch.equal(predictions(fresh, x), before)
    load(fresh, blob)
    assert torch.equal(predictions(fresh, x), before)
    # resuming continues exactly as the uninterrupted run
    a, b = train(alg, 2, start=3), train(fresh, 2, start=3)
    assert a == b
    assert torch.equal(predictions(alg, x), predictions(fresh, x))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_state_dict_is_plain_tensors_for_safetensors(name, tmp_path):
    from safetensors.torch import load_file, save_file

    alg = build(name, backbone_for(name, BACKBONES[0]))
    train(alg, 1)
    state = alg.state_dict()
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "a.safetensors"))
    alg.load_state_dict(load_file(str(tmp_path / "a.safetensors")))


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if get_algorithm(n).MIN_TRAIN_DOMAINS > 1])
def test_multi_domain_algorithms_reject_a_single_training_domain(name):
    with pytest.raises(ValueError, match=rf"{name} needs at least 2 training domains, got 1"):
        build(name, backbone_for(name, BACKBONES[0]), num_domains=1)


@pytest.mark.parametrize("name", ["ERM", "SWAD", "SMA", "MIRO"])
def test_single_source_algorithms_train_on_one_domain(name):
    alg = build(name, BACKBONES[0], num_domains=1)
    out = alg.update(minibatches(0, n=1), 0)
    assert math.isfinite(out["loss"])


def test_update_rejects_a_wrong_number_of_minibatches():
    alg = build("ERM", BACKBONES[0])
    with pytest.raises(ValueError, match="got 2 minibatches but was built for 3 training domains"):
        alg.update(minibatches(0, n=2), 0)


def test_missing_hyperparameter_is_named():
    hp = default_hparams("ERM", "PACS")
    with pytest.raises(KeyError, match="irm_lambda"):
        get_algorithm("IRM")(tiny(BACKBONES[0]), NUM_CLASSES, NUM_DOMAINS, hp)


SINGLE_OBJECTIVE = ["ERM", "IRM", "GroupDRO", "Mixup", "CORAL", "MMD", "VREx", "RDM", "Fishr", "SWAD", "SMA", "MIRO"]
SINGLE_OBJECTIVE += ["ARM", "RSC", "CAD", "CondCAD", "TRM", "URM"]


@pytest.mark.parametrize("name", SINGLE_OBJECTIVE)
def test_moe_aux_loss_is_added_exactly_once(name, monkeypatch):
    alg = build(name, BACKBONES[1])
    calls = []
    original = Algorithm.moe_aux_loss

    def counting(self, network=None):
        value = original(self, network)
        calls.append(value.item())
        return value

    monkeypatch.setattr(Algorithm, "moe_aux_loss", counting)
    out = alg.update(minibatches(0), 0)
    assert len(calls) == 1 and calls[0] > 0 and out["loss_aux"] == pytest.approx(calls[0])


def test_dann_discriminator_steps_leave_the_backbone_alone():
    alg = build("DANN", BACKBONES[1])
    alg.update(minibatches(0), 0)  # update 1: backbone (generator) step
    before = [p.clone() for p in alg.network.parameters()]
    out = alg.update(minibatches(1), 1)  # update 2: discriminator step
    assert "disc_loss" in out and all(torch.equal(a, b) for a, b in zip(before, alg.network.parameters()))
    assert set(alg.optimizers()) == {"optimizer", "discriminator"}


def test_sma_predicts_with_the_mean_of_the_weights():
    from dgmoe.algorithms.averaging import flatten

    alg = build("SMA", BACKBONES[0], sma_start_iter=2)
    seen = []
    for step in range(5):
        alg.update(minibatches(step), step)
        seen.append(flatten(alg.network))
    # iterations 2..5 (t0 = 2: the average starts from theta_2)
    assert torch.allclose(flatten(alg.network_sma), torch.stack(seen[1:]).mean(0), atol=1e-6)


def test_swad_average_equals_the_mean_of_the_averaged_iterates():
    from dgmoe.algorithms.averaging import flatten

    alg = build("SWAD", BACKBONES[0], swad_n_converge=2, swad_n_tolerance=2)
    seen = []
    losses = [3.0, 2.0, 2.5, 2.2, 9.0, 9.0, 9.0]
    for step, loss in enumerate(losses):
        alg.update(minibatches(step), step)
        seen.append(flatten(alg.network))
        alg.on_checkpoint(step, loss)
    # start at checkpoint 2 (2.0 <= 2.5), tolerance 1.3 * 2.25; checkpoints 5 and 6 are both above it,
    # so the window ends at 6 - 2 = 4: iterates 2..4 (1-based), i.e. seen[1:4].
    assert alg.stop_requested
    assert torch.allclose(flatten(alg.network_swad), torch.stack(seen[1:4]).mean(0), atol=1e-6)
    assert alg.checkpoint_record()["swad_start_step"] == 1 and alg.checkpoint_record()["swad_end_step"] == 3
    x = minibatches(50)[0].x
    alg.eval()
    with torch.no_grad():
        assert torch.equal(alg.predict(x), alg.logits(x, network=alg.network_swad))
        assert not torch.equal(alg.predict(x), alg.predict_online(x))
    with pytest.raises(ValueError, match="validation loss"):
        alg.on_checkpoint(9, None)


def test_miro_reference_stays_frozen_at_the_initial_weights():
    alg = build("MIRO", BACKBONES[1])
    init = {k: v.clone() for k, v in alg.reference.state_dict().items()}
    train(alg, 2)
    assert not alg.reference.training
    assert all(torch.equal(init[k], v) for k, v in alg.reference.state_dict().items())
    assert not all(torch.equal(init[k], v) for k, v in alg.network.state_dict().items())


def test_ensemble_of_averages_averages_member_logits():
    members = [build("SMA", BACKBONES[0], seed=s) for s in (0, 1)]
    for m in members:
        train(m, 2)
    x = minibatches(7)[0]
    eoa = EnsembleOfAverages(members).eval()
    expected = (predictions(members[0], x) + predictions(members[1], x)) / 2
    members[0].eval(), members[1].eval()
    assert torch.allclose(eoa.predict(x), expected)
    probs = EnsembleOfAverages(members, combine="probs").eval().predict(x)
    assert torch.allclose(probs.sum(-1), torch.ones(4))
    with pytest.raises(ValueError, match="at least one"):
        EnsembleOfAverages([])


@pytest.mark.parametrize("name", ALGORITHMS)
def test_hparams_defaults_and_random_draws(name):
    cls = get_algorithm(name)
    assert cls.DESCRIPTION and cls.REFERENCE
    hp = default_hparams(name, "PACS")
    for key, spec in hparam_specs(name, "PACS").items():
        assert hp[key] == spec.default
    a, b = random_hparams(name, "PACS", 3), random_hparams(name, "PACS", 3)
    assert a == b


def test_dataset_specific_hparams():
    """DomainBed's per-dataset entries, declared in the catalogue's entries (`DatasetSpec.hparams`)."""
    def specs(name, dataset):
        return hparam_specs(name, dataset)

    assert specs("RDM", "DomainNet")["rdm_lambda"].default == 0.5
    assert specs("RDM", "DomainNet")["batch_size"].default == 40
    assert specs("RDM", "PACS")["batch_size"].default == 88
    assert specs("RDM", "OfficeHome")["variance_weight"].default == 0.0
    assert specs("MIRO", "PACS")["ld"].default == 0.01
    assert specs("MIRO", "OfficeHome")["ld"].default == 0.1
    assert specs("DANN", "RotatedMNIST")["lr_d"].default == 1e-3
    assert specs("D3G", "FMoW")["d3g_domain_field"].default == "region"
    assert get_algorithm("ERM").hparam_specs(dataset_hparams("PACS"), base_hparams("PACS")) == {}


def test_algorithms_override_shared_hparams_only_when_declared():
    assert default_hparams("RDM", "PACS")["batch_size"] == 88  # DomainBed's registry gives RDM its own
    assert default_hparams("RDM", "TerraIncognita")["batch_size"] == 40
    assert default_hparams("RDM", "RotatedMNIST")["batch_size"] == 64  # small images: the shared value
    assert default_hparams("ERM", "PACS")["batch_size"] == 32
    hp = default_hparams("DANN", "PACS", "gmoe_small_patch16_224")
    assert (hp["lr_g"], hp["weight_decay_g"]) == (hp["lr"], hp["weight_decay"]) == (3e-5, 0.0)

    class Clash(get_algorithm("ERM")):
        HPARAMS = {"lr": base_hparams("PACS")["lr"]}

    from dgmoe.algorithms.registry import ALGORITHMS as REGISTRY

    REGISTRY.add("Clash", Clash)
    try:
        with pytest.raises(ValueError, match="OVERRIDES"):
            default_hparams("Clash", "PACS")
    finally:
        REGISTRY._items.pop("Clash")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_optimiser_step_sees_synchronisable_gradients(name):
    """Under torchrun the engine sets `gradient_sync`; it must run before every step that updates the
    backbone and find that step's gradients among the algorithm's registered parameters."""
    alg = build(name, backbone_for(name, BACKBONES[1]))
    seen = []
    alg.gradient_sync = lambda: seen.append(sum(p.grad is not None for p in alg.parameters()))
    alg.update(minibatches(0), 0)
    assert seen and all(n > 0 for n in seen)
    if name in ("Fish", "MLDG"):
        assert not hasattr(alg, "inner")  # the inner copy is registered only while it lives
    if name == "Fish":
        assert len(seen) == NUM_DOMAINS


@pytest.mark.parametrize("name,attr", [("SMA", "network_sma"), ("SWAD", "network_swad"), ("ERM", "network")])
def test_inference_network_is_the_evaluated_one(name, attr):
    alg = build(name, BACKBONES[0])
    train(alg, 3)
    assert alg.inference_network() is getattr(alg, attr)


# These take the gradient of each domain's risk separately (masked or penalised) and add the auxiliary loss's
# own gradient once: more backwards reach the routers than there are auxiliary terms.
PER_DOMAIN_GRADIENTS = {"ANDMask", "SANDMask", "IGA"}


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n != "MoGE"])
def test_every_backward_through_the_moe_routers_carries_the_aux_loss_once(name, monkeypatch):
    """On GMoE, the auxiliary loss is added exactly once to every objective that trains the routers: each value
    `moe_aux_loss` returns receives gradient 1 in exactly one backward (not dropped, not counted twice), and a
    network's routers take as many backwards as auxiliary terms were computed for it (inner copies of MLDG and
    Fish are checked by the first part only)."""
    alg = build(name, BACKBONES[1])
    calls: list[tuple[int, list[float]]] = []
    router_backwards: dict[int, int] = {}
    original = Algorithm.moe_aux_loss

    def recording(self, network=None):
        value = original(self, network)
        grads: list[float] = []
        calls.append((id(network if network is not None else self.network), grads))
        if value.requires_grad:
            value.register_hook(lambda g: grads.append(g.item()))
        return value

    def count(net: int):
        def hook(grad):
            router_backwards[net] = router_backwards.get(net, 0) + 1
        return hook

    monkeypatch.setattr(Algorithm, "moe_aux_loss", recording)
    for network in [m for m in alg.modules() if m is not alg and sparse_layers(m)]:
        if any(network is not m and network in set(m.modules()) for m in alg.modules() if m is not alg):
            continue  # a part of a larger network of the algorithm: counted there
        weight = next(next(iter(sparse_layers(network).values())).router.parameters())
        if weight.requires_grad:  # frozen copies (MIRO's reference, SWAD's and SMA's averages) train nothing
            weight.register_hook(count(id(network)))
    for step in range(3):  # DANN and CDANN alternate discriminator and backbone steps; ERM++ starts linear
        alg.update(minibatches(step), step)
    assert calls, "the auxiliary loss was never computed"
    assert all(grads == [1.0] for _, grads in calls), calls
    for net, backwards in router_backwards.items():
        terms = sum(1 for n, _ in calls if n == net)
        assert terms == backwards or (name in PER_DOMAIN_GRADIENTS and 0 < terms < backwards), (terms, backwards)
