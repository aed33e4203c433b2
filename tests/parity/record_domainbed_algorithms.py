"""Record golden numbers from DomainBed's real algorithms for `test_domainbed_algorithms.py`.

Not a test (pytest does not collect it). It runs each algorithm that DomainBed and dgmoe share, on the tiny
featurizers of `parity_nets.py` (patched in as DomainBed's `networks.Featurizer`), for 3 updates on fixed
batches from fixed weights, in float64 (so that what remains of a difference is the algorithm, not
rounding; the `*_float32` cases in float32, see `Case`), and writes only numbers: the initial weights, the
batches, the hyperparameters, the returned losses and the weights after the updates.

Regenerate (an environment with torch, numpy, torchvision's Python package, timm and, for Fishr,
backpack-for-pytorch; DomainBed exported from its repository, commit b93c22a):

    python tests/parity/record_domainbed_algorithms.py --domainbed /path/to/DomainBed [--cases NAME ...]

Without torchvision and timm, `--stub-vision` records every case but URM (and Fishr needs backpack).

It writes `fixtures/domainbed_algorithms/<case>.{safetensors,json}` for each case of `CASES` (a new
algorithm is a new entry there) and the shared `batches.safetensors`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "domainbed_algorithms"
sys.path.insert(0, str(HERE))
from parity_nets import (  # noqa: E402
    BATCH_SIZE,
    FEATURIZERS,
    INPUT_SHAPE,
    N_UPDATES,
    NUM_CLASSES,
    NUM_DOMAINS,
    float_state,
)

BASE = {"lr": 1e-2, "weight_decay": 1e-3}
DANN = {"lr_g": 5e-3, "weight_decay_g": 2e-3, "lr_d": 1e-2, "weight_decay_d": 1e-3, "lambda": 1.0,
        "d_steps_per_g_step": 1, "grad_penalty": 0.1, "beta1": 0.5, "mlp_width": 16, "mlp_depth": 3,
        "mlp_dropout": 0.0}
#: modules besides the featurizer and the classifier whose weights are set and compared:
#: group -> (DomainBed attribute, dgmoe attribute) on the algorithm object.
DISCRIMINATOR = {"discriminator": ("discriminator", "discriminator"),
                 "class_embeddings": ("class_embeddings", "class_embeddings")}


@dataclass(frozen=True)
class Case:
    """`extras`: group -> (DomainBed attribute path, dgmoe attribute path), modules besides the featurizer and the
    classifier. `parts`: DomainBed's (featurizer, classifier) attribute paths where they are not `featurizer`
    and `classifier`. `attributes`: DomainBed algorithm attributes to set after construction (constants of its
    code that dgmoe has as hyperparameters, so that a short run reaches them). Paths are dotted; a number
    indexes a list (DomainBed keeps some heads in plain lists). `dtype`: float64 (the algorithm, not rounding),
    or float32 for the cases whose DomainBed numbers depend on how float32 rounds (MMD's and RDM's kernels).
    `featurizers`: which of parity_nets' featurizers the case runs on."""

    algorithm: str
    hparams: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    parts: tuple[str, str] | None = None
    attributes: dict = field(default_factory=dict)
    dtype: str = "float64"
    featurizers: tuple[str, ...] = tuple(FEATURIZERS)


#: case name -> what to run. Penalties switch on after one update, so the three updates cover the warm-up,
#: the switch (with its Adam reset) and a penalised step. Each case is one fixture file, so that adding an
#: algorithm adds files and changes none.
CASES: dict[str, Case] = {
    "ERM": Case("ERM"),
    "IRM": Case("IRM", {"irm_lambda": 10.0, "irm_penalty_anneal_iters": 1}),
    "GroupDRO": Case("GroupDRO", {"groupdro_eta": 0.1}),
    "Mixup": Case("Mixup", {"mixup_alpha": 0.4}),
    "MLDG": Case("MLDG", {"mldg_beta": 1.0, "n_meta_test": 2}),
    "MLDG_one_meta_test": Case("MLDG", {"mldg_beta": 0.5, "n_meta_test": 1}),
    "CORAL": Case("CORAL", {"mmd_gamma": 1.0}),
    "MMD": Case("MMD", {"mmd_gamma": 1.0}),
    "DANN": Case("DANN", DANN, DISCRIMINATOR),
    "CDANN": Case("CDANN", DANN, DISCRIMINATOR),
    "VREx": Case("VREx", {"vrex_lambda": 10.0, "vrex_penalty_anneal_iters": 1}),
    "RDM": Case("RDM", {"rdm_lambda": 5.0, "rdm_penalty_anneal_iters": 1, "variance_weight": 0.004,
                        "rdm_lr": 5e-3}),
    "Fish": Case("Fish", {"meta_lr": 0.5}),
    "Fishr": Case("Fishr", {"lambda": 100.0, "penalty_anneal_iters": 1, "ema": 0.9}),
    # DomainBed's remaining algorithms, part 2
    "ARM": Case("ARM", {}, {"context_net": ("context_net", "context_net")}),
    "SagNet": Case("SagNet", {"sag_w_adv": 1.0}, {"style_head": ("network_s", "style_head")},
                   parts=("network_f", "network_c")),
    "RSC": Case("RSC", {"rsc_f_drop_factor": 0.3, "rsc_b_drop_factor": 0.4}),
    "CAD": Case("CAD", {"lmbda": 1.0, "temperature": 0.1}),
    "CondCAD": Case("CondCAD", {"lmbda": 1.0, "temperature": 0.1}),
    "TRM": Case("TRM", {"iters": 1, "cos_lambda": 0.05, "groupdro_eta": 0.5},
                {f"domain_head_{i}": (f"clist.{i}", f"domain_heads.{i}") for i in range(NUM_DOMAINS)}),
    "Transfer": Case("Transfer", {"t_lambda": 1.0, "delta": 0.05, "d_steps_per_g": 2, "lr_d": 0.5},
                     {"adv_classifier": ("adv_classifier", "adv_classifier")}),
    "URM": Case("URM", {"urm_adv_lambda": 0.2, "urm_discriminator_lr": 1e-2},
                {"discriminator": ("discriminator", "discriminator")}),
    "URM_relu_smoothing": Case("URM", {"urm_adv_lambda": 0.2, "urm_discriminator_lr": 1e-2,
                                       "urm_generator_output": "relu", "urm_discriminator_label_smoothing": 0.2,
                                       "urm_discriminator_hidden_layers": 2},
                               {"discriminator": ("discriminator", "discriminator")}),
    "ADRMX": Case("ADRMX", {"d_steps_per_g_step": 1, "mlp_width": 16, "mlp_depth": 3},
                  {"domain_featurizer": ("featurizer_domain", "domain_network.featurizer"),
                   "discriminator": ("discriminator", "discriminator"),
                   "classifier_final": ("classifier_label_2", "classifier_final"),
                   "classifier_domain": ("classifier_domain", "classifier_domain")},
                  parts=("featurizer_label", "classifier_label_1")),
    "ERMPlusPlus": Case("ERMPlusPlus", {"linear_lr": 5e-3, "linear_steps": 1, "ermpp_sma_start_iter": 2},
                        {"sma_featurizer": ("network_sma.0", "network_sma.featurizer"),
                         "sma_classifier": ("network_sma.1", "network_sma.head")},
                        attributes={"sma_start_iter": 2}),
}
#: ANDMask, SANDMask, IGA, SD, SelfReg, MTL, CausIRL_CORAL/MMD, EQRM, IB_ERM, IB_IRM. SelfReg's projection layer
#: and MTL's classifier (on [features, embedding]) and domain embeddings (a buffer) are compared too. MTL runs
#: dgmoe's default `mtl_embedding='noise'`, DomainBed's embedding overwritten with noise (dgmoe.algorithms.mtl).
CASES.update({
    "ANDMask": Case("ANDMask", {"tau": 0.6}),
    "SANDMask": Case("SANDMask", {"tau": 0.5, "k": 0.01}),
    "IGA": Case("IGA", {"penalty": 100.0}),
    "SD": Case("SD", {"sd_reg": 0.05}),
    "SelfReg": Case("SelfReg", {}, {"cdpl": ("cdpl", "cdpl")}),
    "MTL": Case("MTL", {"mtl_ema": 0.9},
                {"classifier": ("classifier", "mtl_classifier"), "embeddings": ("embeddings", "embeddings")}),
    "CausIRL_CORAL": Case("CausIRL_CORAL", {"mmd_gamma": 1.0}),
    "CausIRL_MMD": Case("CausIRL_MMD", {"mmd_gamma": 1.0}),
    "EQRM": Case("EQRM", {"eqrm_quantile": 0.75, "eqrm_burnin_iters": 1, "eqrm_lr": 5e-3}),
    "IB_ERM": Case("IB_ERM", {"ib_lambda": 10.0, "ib_penalty_anneal_iters": 1}),
    "IB_IRM": Case("IB_IRM", {"irm_lambda": 10.0, "irm_penalty_anneal_iters": 1, "ib_lambda": 10.0,
                              "ib_penalty_anneal_iters": 2}),
})
#: float32: the Gaussian-kernel distances of MMD, CausIRL_MMD and RDM (DomainBed's `my_cdist`, whose value for a
#: sample and itself is rounding noise that exp(-1000 d) turns into gradient); dgmoe's default
#: `kernel_self_distance='domainbed'` computes them as DomainBed does. On the BatchNorm featurizer only, where
#: dgmoe forwards each domain as DomainBed does (with LayerNorm it forwards the pooled batch once, whose float32
#: rounding differs, and the kernels amplify that as much as the self-distances).
CASES.update({f"{name}_float32": Case(name, CASES[name].hparams, dtype="float32", featurizers=("batchnorm",))
              for name in ("MMD", "CausIRL_MMD", "RDM")})
WEIGHT_SEED, UPDATE_SEED = 1234, 99


def make_batches() -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """N_UPDATES x NUM_DOMAINS (x, y) pairs; each domain has a shifted input distribution, every class occurs.
    The images are float32 numbers (stored as such), used in float64."""
    rng = np.random.RandomState(0)
    out = []
    for _ in range(N_UPDATES):
        step = []
        for d in range(NUM_DOMAINS):
            x = rng.normal(0.3 * d, 1.0 + 0.2 * d, size=(BATCH_SIZE, *INPUT_SHAPE)).astype(np.float32)
            y = np.concatenate([np.arange(NUM_CLASSES), rng.randint(0, NUM_CLASSES, BATCH_SIZE - NUM_CLASSES)])
            step.append((torch.from_numpy(x), torch.from_numpy(rng.permutation(y)).long()))
        out.append(step)
    return out


def resolve(obj, path: str):
    """`obj.a.b`, where a number indexes a list (`clist.0`)."""
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() and isinstance(obj, (list, tuple)) else getattr(obj, part)
    return obj


def modules_of(algorithm, case: Case) -> dict[str, torch.nn.Module]:
    """The modules whose weights are recorded, in a fixed order: featurizer, classifier, extras."""
    if case.parts is not None:
        mods = {"featurizer": resolve(algorithm, case.parts[0]), "classifier": resolve(algorithm, case.parts[1])}
    elif hasattr(algorithm, "featurizer"):
        mods = {"featurizer": algorithm.featurizer, "classifier": algorithm.classifier}
    else:  # Fish: WholeFish(net = Sequential(featurizer, classifier))
        mods = {"featurizer": algorithm.network.net[0], "classifier": algorithm.network.net[1]}
    for group, (theirs, _) in case.extras.items():
        mods[group] = resolve(algorithm, theirs)
    return mods


def record_case(name: str, featurizer: str, batches, domainbed) -> tuple[dict[str, torch.Tensor], dict]:
    algorithms, hparams_registry, networks = domainbed
    case = CASES[name]
    hparams = {**hparams_registry.default_hparams(case.algorithm, "PACS"), **BASE, **case.hparams}
    dtype = getattr(torch, case.dtype)
    torch.set_default_dtype(dtype)
    networks.Featurizer = lambda input_shape, hp: FEATURIZERS[featurizer](input_shape[0])
    # URM accepts only DomainBed's own featurizer classes: the parity featurizer stands in for the ResNet
    networks.ResNet = FEATURIZERS[featurizer]
    torch.manual_seed(WEIGHT_SEED)
    algorithm = algorithms.get_algorithm_class(case.algorithm)(INPUT_SHAPE, NUM_CLASSES, NUM_DOMAINS, hparams)
    for attribute, value in case.attributes.items():
        setattr(algorithm, attribute, value)
    tensors: dict[str, torch.Tensor] = {}
    for group, module in modules_of(algorithm, case).items():
        for i, t in enumerate(float_state(module)):
            tensors[f"{featurizer}/init/{group}/{i}"] = t.detach().clone().contiguous()
    torch.manual_seed(UPDATE_SEED)
    np.random.seed(UPDATE_SEED)
    outputs = []
    for step in batches:
        result = algorithm.update([(x.to(dtype), y.clone()) for x, y in step])
        outputs.append({k: float(v) for k, v in result.items()})
    for group, module in modules_of(algorithm, case).items():
        for i, t in enumerate(float_state(module)):
            tensors[f"{featurizer}/final/{group}/{i}"] = t.detach().clone().contiguous()
    return tensors, {"outputs": outputs, "hparams": {k: hparams[k] for k in sorted({**BASE, **case.hparams})}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domainbed", required=True, help="a DomainBed checkout (the folder holding domainbed/)")
    parser.add_argument("--out", default=str(FIXTURES))
    parser.add_argument("--cases", nargs="*", default=list(CASES), help="which cases to (re)record")
    parser.add_argument("--stub-vision", action="store_true",
                        help="stand in empty `torchvision` and `timm` modules where they are not installed: "
                             "DomainBed's networks.py imports them, and the parity featurizers replace every "
                             "network the recorded cases build (not for URM, which needs torchvision's ResNet)")
    args = parser.parse_args()
    sys.path.insert(0, args.domainbed)
    if args.stub_vision:
        import importlib.util
        import types

        for name in ("torchvision", "timm"):
            if importlib.util.find_spec(name) is None:
                sys.modules[name] = types.ModuleType(name)
        if isinstance(sys.modules.get("torchvision"), types.ModuleType) and "torchvision.models" not in sys.modules:
            sys.modules["torchvision.models"] = types.ModuleType("torchvision.models")
    torch.Tensor.cuda = lambda self, *a, **k: self  # DomainBed's RDM calls .cuda(); everything runs on CPU
    torch.nn.Module.cuda = lambda self, *a, **k: self  # TRM's heads
    # With torch >= 2.x, BackPACK's module hooks do not fire under `backward(inputs=...)` (no gradient flows to
    # the module's input), so Fishr would find no per-sample gradients. Dropping `inputs` changes only which
    # .grad fields are filled, and Fishr zeroes them before its optimiser step.
    backward = torch.Tensor.backward
    torch.Tensor.backward = lambda self, *a, inputs=None, **k: backward(self, *a, **k)
    from domainbed import algorithms, hparams_registry, networks
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batches = make_batches()
    save_file({f"{u}/{d}/{k}": t for u, step in enumerate(batches) for d, xy in enumerate(step)
               for k, t in zip("xy", xy)}, str(out / "batches.safetensors"))
    commit = subprocess.run(["git", "-C", args.domainbed, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "b93c22a (exported tree, no git metadata)"
    for name in args.cases:
        tensors: dict[str, torch.Tensor] = {}
        runs: dict[str, dict] = {}
        for featurizer in CASES[name].featurizers:
            found, runs[featurizer] = record_case(name, featurizer, batches, (algorithms, hparams_registry, networks))
            tensors.update(found)
        case = CASES[name]
        meta = {
            "peer": "DomainBed", "peer_commit": commit, "torch": torch.__version__, "dtype": case.dtype,
            "regenerate": "python tests/parity/record_domainbed_algorithms.py --domainbed /path/to/DomainBed "
                          f"--cases {name}",
            "what": "DomainBed's algorithm on parity_nets' featurizers, 3 updates from fixed weights on the fixed "
                    "batches of batches.safetensors; tensors '<featurizer>/{init,final}/<module>/<i>' are "
                    "float_state() entries",
            "seeds": {"weights": WEIGHT_SEED, "updates (torch and numpy)": UPDATE_SEED},
            "algorithm": case.algorithm, "hparams": runs[case.featurizers[0]]["hparams"],
            "extras": {group: mine for group, (_, mine) in case.extras.items()},
            "domainbed_attributes": case.attributes,
            "outputs": {f: r["outputs"] for f, r in runs.items()},
        }
        save_file(tensors, str(out / f"{name}.safetensors"))
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
