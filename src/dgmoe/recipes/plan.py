"""A recipe's sweeps at a scale: `paper` (the paper's grid, data and weights) or `smoke` (a CPU minute).

`part_sweeps` turns one `Part` into `SweepConfig`s for `dgmoe.sweep` (one per group of datasets that share
their per-dataset settings), all launched into `<output-dir>/<part>`. `missing_inputs` lists, one line each,
the data folders (through the dataset catalogue) and weight files a paper-scale launch needs and lacks.

The smoke scale (`SMOKE`) keeps each part's algorithms, variants (hparams, model kwargs such as a block layout or
an expert count, and every other model or algorithm setting such as a PEFT mode and its knobs) and held-out-set
shape, and swaps the rest for what runs on a CPU in seconds: the datasets for an in-memory stand-in of the same
kind (`Debug28`; `RotatedMNIST`, which has DomainNet's six domains, for single-source; `GeoMNIST`, which has
coordinates, for the MoGE tables), the backbones for narrow ones of the same family (`vit_micro_patch7_28`,
`gmoe_micro_patch7_28`, SF-MoE and MoGE at width 48 on 7 px patches; a ResNet becomes the micro ViT; a CLIP or
DINOv2 tower its test-sized stand-in, e.g. `vit_micro_patch7_clip_quickgelu_28`, `vit_micro_patch7_dinov2`; GMoE on
a CLIP tower the stand-in's GMoE twin, `gmoe_micro_patch7_clip_quickgelu_28`), the paper's weights for a dense
checkpoint the launch writes (`SmokeCheckpoint`: each backbone's dense twin, loaded with --pretrained as the
paper's runs load DeiT: experts copied from the FFN, what a dense checkpoint cannot hold initialised, the head and
embeddings adapted), a few steps, one hparams setting, one trial, one held-out set (the first domain;
single-source: the first training domain). A dataset of `SmokeScale.folder_stand_ins` (ImageNet and its shifts)
stays itself, on stand-in folders in its published layout that the launch writes (`SmokeData`). Parts with CLIP
text heads (`--head zeroshot`, prompted with one template) load no smoke checkpoint (their stand-in towers keep
their seeded image and text weights), and a part of `steps` 0 (a zero-shot evaluation) stays at 0 steps.
Without pair runs, the smoke summary selects by training-domain validation. The runs a WiSE-FT soup part averages
keep their best weights at the smoke scale too; a soup part itself has no sweep (`dgmoe.recipes.soups` makes it).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError
from dgmoe.names import is_text_head
from dgmoe.recipes.base import Part, Recipe, Row, soup_sources
from dgmoe.sweep.config import SweepConfig

SCALES = ("paper", "smoke")
MERGED = ("hparams", "model_kwargs")  # settings whose per-dataset values are merged into the part's
#: the `RunConfig` sections whose part settings the smoke scale keeps (what the model and algorithm are)
VARIANT_SECTIONS = ("model", "peft", "algorithm")


@dataclass(frozen=True)
class SmokeScale:
    """The CPU smoke scale of every recipe (see the module docstring)."""

    stand_ins: Mapping[str, str] = field(default_factory=lambda: {
        "domainbed": "Debug28", "single_source": "RotatedMNIST", "wilds": "GeoMNIST"})
    steps: int = 2
    checkpoint_freq: int = 1
    n_per_domain: int = 16
    patch_size: int = 7
    hparams: Mapping[str, Any] = field(default_factory=lambda: {"batch_size": 8})
    #: an algorithm's own hparams at this scale: LP-FT's probe takes the first of the 2 steps, so that the run
    #: fine-tunes too (its 500-update default would be refused: a probe labelled LP-FT)
    algorithm_hparams: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {"LPFT": {"linear_steps": 1}})
    model_kwargs: Mapping[str, Any] = field(default_factory=lambda: {"embed_dim": 48, "num_heads": 2})
    #: model kwargs that name real-data inputs the stand-ins lack (camera ids, a SatCLIP file)
    dropped_kwargs: tuple[str, ...] = ("location_encoder", "location_encoder_kwargs")
    execution: Mapping[str, Any] = field(default_factory=lambda: {
        "num_threads": 1, "skip_model_save": True, "save_best": False, "progress": "none"})
    #: where the launch writes the dense checkpoints of the parts that load weights (under the output dir), and
    #: their class count: an ImageNet head, which the load re-initialises as in the paper's runs
    #: foundation towers by a part of their name -> their test-sized stand-in of the same family
    #: (`dgmoe.models.foundation`), first match wins
    towers: tuple[tuple[str, str], ...] = (
        ("_clip_quickgelu_", "vit_micro_patch7_clip_quickgelu_28"), ("_clip_", "vit_micro_patch7_clip_28"),
        ("_reg4_dinov2", "vit_micro_patch7_reg4_dinov2"), ("_dinov2", "vit_micro_patch7_dinov2"))
    #: GMoE on a foundation tower -> the GMoE twin of the tower's stand-in (CLIP's: with the micro text tower)
    gmoe_towers: tuple[tuple[str, str], ...] = (
        ("_clip_quickgelu_", "gmoe_micro_patch7_clip_quickgelu_28"), ("_clip_", "gmoe_micro_patch7_clip_28"))
    #: datasets whose stand-in is their own folder layout with a few random images (the launch writes it into
    #: `data_dir` under the output dir: `dgmoe.data.shifts.STAND_INS`), e.g. ImageNet and its shifts
    folder_stand_ins: tuple[str, ...] = ("ImageNetShifts",)
    data_dir: str = "smoke-data"
    #: the template set of the stand-ins' text heads: one template ("a photo of a {}."), as 1,000 ImageNet classes
    #: x 80 templates through the text tower would outweigh the rest of a CPU minute
    prompt_templates: str = "domainbed"
    weights_dir: str = "smoke-weights"
    weights_classes: int = 1000

    def model(self, model: str) -> str:
        """The narrow backbone of `model`'s family."""
        if model.startswith("gmoe_"):
            return next((twin for family, twin in self.gmoe_towers if family in model), "gmoe_micro_patch7_28")
        if model.startswith(("sfmoe_", "hybrid_sfmoe_")):
            return "sfmoe_small_patch16_224"
        if model.startswith("moge_"):
            return "moge_tiny_patch16_224"
        if model.startswith("vit_le_"):
            return model
        for family, stand_in in self.towers:
            if family in model:
                return stand_in
        return "vit_micro_patch7_28"


SMOKE = SmokeScale()


@dataclass(frozen=True)
class SmokeCheckpoint:
    """A dense checkpoint that smoke runs load with --pretrained: `model` (a registered dense model) built with
    `kwargs`, written to `path` by the launch (`write`)."""

    path: str
    model: str
    kwargs: tuple[tuple[str, Any], ...]

    def write(self) -> bool:
        """Write the file unless it is there (the same weights every time: seed 0); True if written."""
        if Path(self.path).is_file():
            return False
        from dgmoe.models.twin import write_dense_checkpoint  # (torch: loaded when a launch writes weights)

        write_dense_checkpoint(self.path, self.model, seed=0, **dict(self.kwargs))
        return True


@dataclass(frozen=True)
class SmokeData:
    """The stand-in folders of `dataset` (one of `SmokeScale.folder_stand_ins`) that smoke runs read with
    --data-dir `path`, written by the launch (`write`)."""

    path: str
    dataset: str

    def write(self) -> bool:
        """Write the folders unless they are complete (the same images every time); True if written."""
        from dgmoe.data.shifts import STAND_INS  # (the data layer: loaded when a launch writes data)

        return STAND_INS[self.dataset](self.path)


def smoke_data(part: Part, output_dir: str | Path) -> tuple[SmokeData, ...]:
    """The stand-in folders `part` reads at the smoke scale (none: it runs on the in-memory stand-in)."""
    root = Path(output_dir).absolute() / SMOKE.data_dir
    return tuple(SmokeData(str(root), d) for d in part.datasets if d in SMOKE.folder_stand_ins)


def smoke_checkpoints(recipe: Recipe, part: Part, models: Iterable[str],
                      output_dir: str | Path) -> dict[SmokeCheckpoint | None, tuple[str, ...]]:
    """`part`'s smoke backbones grouped by the checkpoint they load (None: the part loads no weights). Each
    backbone's is its dense twin at the smoke width and the stand-in's channels, at the twin's own image and
    patch size (the load resamples them, as the paper's iWildCam runs resample 384 px weights to 448)."""
    models = tuple(dict.fromkeys(SMOKE.model(m) for m in models))
    if not part.pretrained or text_head(part):
        return {None: models}
    from dgmoe.data.catalogue import get_spec  # (the catalogue and the models import torch)
    from dgmoe.models.twin import dense_twin

    channels = get_spec(SMOKE.stand_ins[recipe.kind]).channels
    groups: dict[SmokeCheckpoint | None, tuple[str, ...]] = {}
    for model in models:
        twin, kwargs = dense_twin(model, **smoke_settings(part)["model_kwargs"])
        kwargs.update(in_chans=channels, num_classes=SMOKE.weights_classes)
        digest = hashlib.sha1(json.dumps([twin, kwargs], sort_keys=True).encode()).hexdigest()[:8]
        path = Path(output_dir).absolute() / SMOKE.weights_dir / f"{twin}-{digest}.safetensors"
        checkpoint = SmokeCheckpoint(str(path), twin, tuple(sorted(kwargs.items())))
        groups[checkpoint] = (*groups.get(checkpoint, ()), model)
    return groups


def text_head(part: Part) -> bool:
    """Whether the part's heads come from CLIP's text tower (`--head zeroshot`): at the smoke scale its stand-in
    towers keep their seeded random image and text weights (a dense image checkpoint has no text tower)."""
    return is_text_head(part.settings.get("head") or "")


def check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise UsageError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")


def row_model(row: Row, scale: str) -> str:
    """The backbone a row's runs use at `scale`."""
    return SMOKE.model(row.model) if scale == "smoke" else row.model


def available_rows(recipe: Recipe, labels: Iterable[str] = ()) -> list[Row]:
    """The rows to launch: those named in `labels` (all by default) that dgmoe can produce; a named row it
    cannot produce, or an unknown label, is a usage error."""
    labels = list(labels)
    if not labels:
        rows = [r for r in recipe.rows if not r.unavailable]
        if not rows:
            raise UsageError(f"recipe {recipe.name} has no row dgmoe can run")
        return rows
    rows = []
    for label in labels:
        try:
            row = recipe.row(label)
        except KeyError:
            raise UsageError(f"--rows {label!r}: recipe {recipe.name} has rows "
                             f"{', '.join(repr(r.label) for r in recipe.rows)}") from None
        if row.unavailable:
            raise UsageError(f"--rows {label!r} cannot be run by dgmoe: {row.unavailable}")
        rows.append(row)
    return rows


def row_parts(recipe: Recipe, row: Row) -> list[Part]:
    """The parts that produce a row (one per group of its datasets), in the recipe's order."""
    found = {p.name for c in row.cells for p in [recipe.row_part(row, c.dataset)] if p is not None}
    return [p for p in recipe.parts if p.name in found]


def parts_for(recipe: Recipe, rows: Iterable[Row]) -> list[tuple[Part, tuple[str, ...], tuple[str, ...]]]:
    """(part, algorithms, models) to launch for `rows`: each part restricted to the algorithms and models of
    the rows it serves (a job's id does not depend on the grid, so a later full launch reuses its runs)."""
    rows = list(rows)
    out = []
    chosen = {p.name for r in rows for p in row_parts(recipe, r)}
    needed = {n for p in recipe.parts if p.name in chosen and p.wise_ft for n in (p.wise_ft.fine_tuned,
                                                                                   p.wise_ft.zero_shot)}
    for part in recipe.parts:
        mine = [r for r in rows if part in row_parts(recipe, r)]
        if part.name in needed:  # a soup's two parts run whole (their algorithms and models are the soup's)
            out.append((part, part.algorithms, part.models))
        elif mine:
            out.append((part, tuple(a for a in part.algorithms if any(r.algorithm == a for r in mine)),
                        tuple(m for m in part.models if any(r.model == m for r in mine))))
    return out


def _merge(settings: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(settings)
    for key, value in more.items():
        out[key] = {**out.get(key, {}), **value} if key in MERGED else value
    return out


def paper_settings(part: Part, dataset: str, weights: Mapping[str, str]) -> dict[str, Any]:
    """The flat run settings of `part`'s jobs on `dataset` at the paper's scale, weights included."""
    flat = _merge(part.settings, part.per_dataset.get(dataset, {}))
    if part.pretrained:
        flat["pretrained"] = os.path.abspath(weights[part.pretrained])
    if part.location_weights:
        encoder = {"location_encoder": "pretrained",
                   "location_encoder_kwargs": {"path": os.path.abspath(weights[part.location_weights])}}
        flat = _merge(flat, {"model_kwargs": encoder})
    return flat


def smoke_settings(part: Part) -> dict[str, Any]:
    """The flat run settings of `part`'s jobs at the smoke scale: its variants kept (its model and algorithm
    settings: hparams, model kwargs, a PEFT mode and its knobs, ...), the smoke scale's own data, width, patch
    size, steps and execution settings for the rest (see `SmokeScale`)."""
    sections = RunConfig.keys()
    flat = {k: v for k, v in part.settings.items() if sections[k][0] in VARIANT_SECTIONS}
    kwargs = {k: v for k, v in flat.get("model_kwargs", {}).items() if k not in SMOKE.dropped_kwargs}
    flat["model_kwargs"] = {**kwargs, **SMOKE.model_kwargs}
    own = [SMOKE.algorithm_hparams.get(a, {}) for a in part.algorithms]
    flat["hparams"] = {**flat.get("hparams", {}), **SMOKE.hparams, **(own[0] if len(own) == 1 else {})}
    steps = 0 if part.settings.get("steps") == 0 else SMOKE.steps  # a zero-shot evaluation stays untrained
    if "prompt_templates" in flat:
        flat["prompt_templates"] = SMOKE.prompt_templates
    return {**flat, "steps": steps, "checkpoint_freq": SMOKE.checkpoint_freq,
            "n_per_domain": SMOKE.n_per_domain, "patch_size": SMOKE.patch_size, **SMOKE.execution}


def part_sweeps(recipe: Recipe, part: Part, algorithms: tuple[str, ...], models: tuple[str, ...], scale: str,
                output_dir: str | Path, base: RunConfig, weights: Mapping[str, str] | None = None,
                n_hparams: int | None = None, n_trials: int | None = None) -> list[SweepConfig]:
    """The sweeps of one part at `scale` into `<output_dir>/<part>`; `base` holds the execution settings
    (data dir, device, ...); `n_hparams`/`n_trials` replace the part's (paper scale only)."""
    out = str(Path(output_dir) / part.name)
    if part.wise_ft is not None:  # a soup part: made after its two parts' sweeps (`dgmoe.recipes.soups`)
        return []
    if scale == "smoke":
        folders = smoke_data(part, output_dir)
        datasets = tuple(d.dataset for d in folders) or (SMOKE.stand_ins[recipe.kind],)
        sets = part.test_env_sets[:1] or ((0,),)
        settings = {**smoke_settings(part), **({"data_dir": folders[0].path} if folders else {})}
        if part.name in soup_sources(recipe):  # a soup averages these runs' weights: keep them
            settings.update(skip_model_save=False, save_best=True)
        return [SweepConfig(datasets, algorithms, group, out, RunConfig.from_flat(
                    {**settings, "pretrained": checkpoint.path} if checkpoint else settings, base=base),
                    n_hparams=1, n_trials=1, test_env_sets=sets)
                for checkpoint, group in smoke_checkpoints(recipe, part, models, output_dir).items()]
    groups: dict[str, list[str]] = {}
    for dataset in part.datasets:
        groups.setdefault(repr(sorted(part.per_dataset.get(dataset, {}).items())), []).append(dataset)
    return [SweepConfig(tuple(datasets), algorithms, models, out,
                        RunConfig.from_flat(paper_settings(part, datasets[0], weights or {}), base=base),
                        n_hparams=n_hparams or part.n_hparams, n_trials=n_trials or part.n_trials,
                        single_test_envs=part.single_test_envs, test_env_sets=part.test_env_sets)
            for datasets in groups.values()]


def resolve_weights(recipe: Recipe, needed: Iterable[str], values: Iterable[str]) -> dict[str, str]:
    """{weights key: file} from `--pretrained` values: `KEY=FILE`, a folder holding the files by their hint
    names, or a single FILE when exactly one kind of weights is needed."""
    needed = list(dict.fromkeys(needed))
    declared = {w.key for w in recipe.weights}
    out: dict[str, str] = {}
    for value in values:
        key, sep, path = value.partition("=")
        if sep:
            if key not in declared:
                raise UsageError(f"--pretrained {value}: recipe {recipe.name} expects weights "
                                 f"{', '.join(sorted(declared)) or '(none)'}, not {key!r}")
            out[key] = path
        elif Path(value).is_dir():
            for k in needed:
                out.setdefault(k, str(Path(value) / recipe.weights_of(k).hint))
        elif len(needed) == 1:
            out[needed[0]] = value
        else:
            raise UsageError(f"--pretrained {value}: this launch needs {len(needed)} kinds of weights "
                             f"({', '.join(needed) or 'none'}); pass KEY=FILE for each, or a folder holding "
                             f"{', '.join(recipe.weights_of(k).hint for k in needed)}")
    return out


def missing_inputs(recipe: Recipe, parts: Iterable[Part], data_dir: str | None,
                   weights: Mapping[str, str]) -> list[str]:
    """One line per missing data folder or weights file of a paper-scale launch of `parts` (none: ready)."""
    from dgmoe.data.catalogue import check_data  # the catalogue imports torch: loaded when a launch checks
    from dgmoe.data.errors import DatasetError

    parts = list(parts)
    lines = []
    for dataset in dict.fromkeys(d for p in parts for d in p.datasets):
        try:
            check_data(dataset, data_dir)
        except DatasetError as err:
            lines.append(f"data {dataset}: {str(err).removeprefix(dataset + ': ')}")
    for key in dict.fromkeys(k for p in parts for k in p.weight_keys()):
        w = recipe.weights_of(key)
        if key not in weights:
            lines.append(f"weights {key}: not given; pass --pretrained {key}=FILE (a {w.hint}: {w.source})")
        elif not Path(weights[key]).is_file():
            lines.append(f"weights {key}: no file {weights[key]} (expected a {w.hint}: {w.source})")
    return lines
