"""The hyperparameters of a run, resolved as DomainBed's `train.py` does.

The shared entries (`base_hparams`) come from the dataset and from the backbone's own description
(`ModelInfo`, never its name): DomainBed's optimiser and batch entries for dense backbones, the GMoE
registry's `lr`/`weight_decay` for sparse ones (GMoE Table 8), the backbone's regularisers (stochastic depth
for the ViT family, DomainBed's `resnet_dropout` for ResNets) and a weight for every auxiliary loss its
sparse layers produce. The algorithm adds its own (`Algorithm.hparam_specs`), and may replace a shared one
only if it says so (`OVERRIDES`). `hparams_seed == 0` gives the defaults; any other seed draws with
`seed_hash(hparams_seed, trial_seed)`, each name from its own generator.
"""
from __future__ import annotations

from typing import Any, Mapping

from dgmoe.algorithms import get_algorithm
from dgmoe.data.catalogue import dataset_hparams
from dgmoe.errors import UsageError
from dgmoe.hparams import (
    DatasetHParams,
    HParam,
    choice,
    fixed,
    log_uniform,
    non_negative,
    positive,
    pow2_int,
    probability,
)
from dgmoe.models.info import ModelInfo, describe_model
from dgmoe.moe.auxiliary import AUX_LOSS_WEIGHTS
from dgmoe.seeding import seed_hash

#: the dense backbone `default_hparams` and friends describe when no model is named.
DEFAULT_MODEL = "vit_tiny_patch16_224"


def base_hparams(dataset: str | DatasetHParams, model: str | ModelInfo = DEFAULT_MODEL) -> dict[str, HParam]:
    """Hyperparameters every run with this dataset (a catalogue name, or its `DatasetHParams`) and backbone
    has (see the module docstring)."""
    info = model if isinstance(model, ModelInfo) else describe_model(model)
    facts = dataset_hparams(dataset) if isinstance(dataset, str) else dataset
    small = facts.small_images
    sparse = info.sparse
    hp: dict[str, HParam] = {}
    if small:
        hp["lr"] = HParam(1e-3, log_uniform(-4.5, -2.5), positive)
        hp["weight_decay"] = HParam(0.0, fixed(0.0), non_negative)
        hp["batch_size"] = HParam(64, pow2_int(3, 9), positive)
    elif sparse is not None:  # the GMoE registry: lr 10^U(-4.5,-2.5), weight decay 0 in random search
        lr, wd = facts.gmoe_lr_wd or (5e-5, 0.0)
        hp["lr"] = HParam(lr, log_uniform(-4.5, -2.5), positive)
        hp["weight_decay"] = HParam(wd, fixed(0.0), non_negative)
    else:
        hp["lr"] = HParam(5e-5, log_uniform(-5, -3.5), positive)
        hp["weight_decay"] = HParam(0.0, log_uniform(-6, -2), non_negative)
    if not small:
        hp["batch_size"] = HParam(32, pow2_int(3, facts.batch_size_log2_max), positive)
    if "resnet_dropout" in info.hparam_kwargs:  # DomainBed's dropout on the pooled ResNet feature
        hp["resnet_dropout"] = HParam(0.0, choice([0.0, 0.1, 0.5]), probability)
    if "drop_path_rate" in info.hparam_kwargs:  # stochastic depth of the ViT family (GMoE: 0.1; MoA's code: 0)
        rate = 0.0 if small or (info.peft is not None and info.peft.mode == "moa") else 0.1
        hp["drop_path_rate"] = HParam(rate, fixed(rate), probability)
    hp["data_augmentation"] = HParam(True, fixed(True))
    if info.routes_tokens:  # the backbone's sparse FFNs, or adapter experts (`--peft adapter_experts`)
        # lambda of GMoE eq. C.4: the per-layer loss is 0.5 * lambda * (L_imp + L_load); the official code
        # weights (L_imp + L_load)/2 by 0.01, i.e. lambda = 0.01.
        hp[AUX_LOSS_WEIGHTS["balance"]] = HParam(0.01, log_uniform(-3, -1), non_negative)
        if sparse is not None and sparse.cka_tokens > 0:  # MoGE eq. 4's lambda_CKA (no value in the paper: 0.1)
            hp[AUX_LOSS_WEIGHTS["cka"]] = HParam(0.1, log_uniform(-3, 0), non_negative)
    return hp


def _resolve(specs: Mapping[str, HParam], seed: int | None) -> dict[str, Any]:
    if seed is None:
        return {k: v.default for k, v in specs.items()}
    return {k: v.draw(k, seed) for k, v in specs.items()}


def hparam_specs(algorithm: str, dataset: str, model: str | ModelInfo = DEFAULT_MODEL) -> dict[str, HParam]:
    """The shared hyperparameters, then the algorithm's own, then the dataset's entries for the algorithm
    (`DatasetHParams.algorithms`). An algorithm may replace a shared one only if it lists the name in its
    `OVERRIDES` (as DomainBed's registry gives RDM its own batch size); a dataset's entry must name one of the
    algorithm's hyperparameters or overrides."""
    cls = get_algorithm(algorithm)
    facts = dataset_hparams(dataset)
    specs = base_hparams(facts, model)
    own = cls.hparam_specs(facts, specs)
    for name, spec in own.items():
        if name in specs and name not in cls.OVERRIDES:
            raise ValueError(f"algorithm {algorithm} redefines shared hyperparameter {name!r} without declaring it "
                             "in OVERRIDES")
        specs[name] = spec
    for name, spec in facts.for_algorithm(algorithm).items():
        if name not in own and name not in cls.OVERRIDES:
            raise ValueError(f"dataset {dataset} sets {algorithm}'s {name!r}, which {algorithm} does not declare")
        specs[name] = spec
    return specs


def default_hparams(algorithm: str, dataset: str, model: str | ModelInfo = DEFAULT_MODEL) -> dict[str, Any]:
    return _resolve(hparam_specs(algorithm, dataset, model), None)


def random_hparams(algorithm: str, dataset: str, seed: int, model: str | ModelInfo = DEFAULT_MODEL) -> dict[str, Any]:
    return _resolve(hparam_specs(algorithm, dataset, model), seed)


def run_hparams(algorithm: str, dataset: str, model: str | ModelInfo, hparams_seed: int, trial_seed: int,
                overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The hyperparameters of one run, as DomainBed's train.py resolves them, with checked overrides."""
    specs = hparam_specs(algorithm, dataset, model)
    hp = _resolve(specs, None if hparams_seed == 0 else seed_hash(hparams_seed, trial_seed))
    for key, value in (overrides or {}).items():
        if key not in hp:
            raise UsageError(f"--hparams names unknown hyperparameter {key!r} for {algorithm} on {dataset}; "
                             f"valid: {', '.join(sorted(hp))}")
        specs[key].validate(key, value)
        hp[key] = value
    return hp
