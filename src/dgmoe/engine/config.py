"""The description of one training run: DomainBed's `train.py` arguments, typed, frozen, validated, nested.

A `RunConfig` has seven sections. Six say what the run computes (`data`, `model`, `peft`, `algorithm`,
`seeds`, `training`) and make up its `identity()`, what "the same run" means for resuming and for a sweep's job ids;
the seventh, `execution`, says where and how it runs (paths, device, workers, logging, which files to keep)
and is left out of the identity by construction, so moving the data or changing the GPU never orphans a run.

Every knob is declared once, with its type, default, help and constraints (`dgmoe.settings.setting`);
the `dgmoe train` flags are generated from these declarations (`dgmoe.cli.options`), and the flat view
(`flat()`, one key per flag) is what DomainBed records carry as `args`. A config that exists is valid:
construction checks every value and raises a `ConfigError` naming the flag, before anything is written.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping

from dgmoe.devices import compile_mode_setting, device_setting, precision_setting
from dgmoe.names import HEADS, is_text_head
from dgmoe.peft.config import PeftConfig
from dgmoe.settings import ConfigError, Settings, config_from_file, flag, key_of, plain, setting
from dgmoe.tables import unfit_for_a_label


class _Section(Settings):
    """A section of a run: its fields are `setting`s, checked on construction (`Settings`); its flags also take
    DomainBed's underscore spellings (`--test_envs`)."""

    DOMAINBED_FLAGS: ClassVar[bool] = True


@dataclass(frozen=True)
class DataConfig(_Section):
    """Which images, which domains are held out, how each domain is split."""

    dataset: str = setting("RotatedMNIST", "Catalogue name (see `dgmoe data list`).")
    test_envs: tuple[int, ...] = setting((0,), "Held-out domain indices, DomainBed's --test_envs (FMoW, FMoW-LAO, "
                                           "iWildCam: WILDS' official split by default).", minimum=0)
    holdout_fraction: float = setting(0.2, "Share of each domain held out as its 'out' split.", minimum=0,
                                      maximum=1, exclusive_min=True, exclusive_max=True)
    uda_holdout_fraction: float = setting(
        0.0, "Share of each test domain's 'in' split held out as its unlabeled 'uda' split (DomainBed's "
             "--uda_holdout_fraction): evaluated as env<k>_uda_acc, never trained on.", minimum=0, maximum=1,
        exclusive_max=True)
    img_size: int | None = setting(None, "Image size in pixels [the dataset's own (MNIST 28); a folder of images: "
                                         "224, or the model's registered size where it differs, e.g. 28 for the "
                                         "micro stand-ins].", minimum=1)
    n_per_domain: int | None = setting(None, "Subsample each domain to this many images (quick runs).", minimum=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.test_envs)) != len(self.test_envs):
            raise ConfigError(f"{flag('test_envs')} names a domain twice: {list(self.test_envs)}")


@dataclass(frozen=True)
class ModelConfig(_Section):
    """The backbone: a registered name, its overrides and, optionally, local pretrained weights."""

    name: str = setting("vit_tiny_patch16_224", "Registered model name (see `dgmoe models`).", key="model")
    patch_size: int | None = setting(None, "ViT patch size in pixels [model default].", minimum=1)
    kwargs: dict[str, Any] = setting({}, "create_model overrides as a JSON object, e.g. '{\"depth\": 6}'.",
                                     key="model_kwargs")
    pretrained: str | None = setting(None, "Local timm/DeiT checkpoint file (.safetensors or .pth).")
    pretrained_antialias: bool = setting(
        True, "Resample the checkpoint's position/patch embeddings with antialiased bicubic as timm >= 0.9 "
              "(--no-pretrained-antialias: plain bicubic, timm 0.5-0.6).")
    head: str = setting("linear", "The classifier (docs/design.md, CLIP's text tower): linear = a new linear head "
                                  "(timm's); zeroshot = CLIP's zero-shot classifier from the class names and "
                                  "--prompt-templates on the normalised image feature: with --steps 0 a zero-shot "
                                  "evaluation, trained a text-initialised head. CLIP image towers only.",
                        choices=HEADS)
    prompt_templates: str = setting("openai_imagenet", "The prompts of --head zeroshot: openai_imagenet (CLIP's 80 "
                                                       "ImageNet templates), domainbed (\"a photo of a {}.\") or a "
                                                       "file, one template with one {} per line.")
    text_pretrained: str | None = setting(None, "The file holding CLIP's text tower for --head zeroshot "
                                                "[--pretrained]: an OpenAI/OpenCLIP state dict, a Hugging Face "
                                                "CLIPModel or CLIPTextModelWithProjection.")

    def __post_init__(self) -> None:
        if self.pretrained is True or self.pretrained == "True":  # timm's habit: download the weights
            from dgmoe.names import weights_help

            raise ConfigError(f"{flag('pretrained')} must be a checkpoint file, got {self.pretrained!r}; "
                              f"{weights_help(self.name)}")
        super().__post_init__()

    def check_head(self) -> None:
        """A `ConfigError` for text-head settings given without `--head zeroshot` (they would be ignored);
        checked when the run is prepared (each setting alone stays a valid config)."""
        defaults = ModelConfig()
        unread = [name for name in ("prompt_templates", "text_pretrained")
                  if getattr(self, name) != getattr(defaults, name)]
        if not is_text_head(self.head) and unread:
            raise ConfigError(f"{flag(unread[0])} is read by --head zeroshot only; add --head zeroshot or leave it out")


@dataclass(frozen=True)
class AlgorithmConfig(_Section):
    """The DG algorithm and its hyperparameter overrides."""

    name: str = setting("ERM", "DG algorithm (see `dgmoe algorithms`).", key="algorithm")
    hparams: dict[str, Any] = setting({}, "Hyperparameter overrides as a JSON object, e.g. '{\"lr\": 1e-4}'.")


@dataclass(frozen=True)
class SeedConfig(_Section):
    """DomainBed's three seeds."""

    trial_seed: int = setting(0, "Seeds the in/out splits.", minimum=0)
    hparams_seed: int = setting(0, "0 = default hparams, else a random draw (DomainBed's).", minimum=0)
    seed: int = setting(0, "Seeds init, batches, augmentation, noise.", minimum=0)


@dataclass(frozen=True)
class TrainingConfig(_Section):
    """How long, how often evaluated, in which arithmetic."""

    steps: int | None = setting(None, "Training steps [dataset default: 5001, DomainNet 15001]; 0 evaluates the "
                                      "initial network once (e.g. a zero-shot head).", minimum=0)
    checkpoint_freq: int | None = setting(None, "Steps between evaluations [dataset default].", minimum=1)
    precision: str = precision_setting("Arithmetic of the training step and the evaluations: fp32 (IEEE, TF32 off on "
                                       "CUDA, DomainBed's), tf32 (fp32 weights, TF32 matmuls and convolutions; "
                                       "CUDA only) or bf16 (autocast).")
    fused_optimizer: bool = setting(
        False, "Adam, AdamW and SGD run torch's fused kernel: one kernel per step instead of torch's default "
               "(DomainBed's), whose Python took about a tenth of a host-bound GPU step (docs/benchmarks.md, "
               "section 12). The same update, rounded differently.")
    eval_sample: int | None = setting(
        None, "Evaluate a fixed, seeded sample of this many images per split (in, out, uda) of every domain at the "
              "intermediate checkpoints and every image at the last; records say which (eval_sample). Default: "
              "every image at every checkpoint (DomainBed's).", minimum=1)


@dataclass(frozen=True)
class ExecutionConfig(_Section):
    """Where and how the run executes; none of it changes what the run computes."""

    #: a setting that means something only with a switch on: (setting, the switch it needs)
    NEEDS: ClassVar[dict[str, str]] = {"wandb_project": "wandb", "wandb_entity": "wandb", "wandb_name": "wandb",
                                       "mlflow_uri": "mlflow", "mlflow_experiment": "mlflow"}

    output_dir: str | None = setting(None, "Run folder, required (re-running the same command resumes).")
    data_dir: str | None = setting(None, "Root holding <Name>/<domain>/<class>/<img>; optional for MNIST.")
    label: str | None = setting(None, "Name of the run in results tables and reports, one line of text (tables "
                                      "escape |, &, %, < and the like); naming leaves the run's identity unchanged.")
    device: str = device_setting("(config.json records the device used)")
    num_workers: int = setting(0, "Data-loading worker processes, for data decoded per item (on a GPU the loader "
                                  "already runs in a background thread; cached data needs none).", minimum=0)
    num_threads: int | None = setting(None, "torch intra-op threads [torch's default].", minimum=1)
    eval_batch_size: int = setting(64, "Batch size of the evaluations.", minimum=1)
    compile: bool = setting(False, "torch.compile the model block by block (dgmoe.models.compiled); the first "
                                   "steps then take longer while graphs are built.")
    compile_mode: str = compile_mode_setting()
    save_best: bool = setting(True, "Keep best.safetensors, the weights with the best training-domain validation.")
    skip_model_save: bool = setting(False, "Keep no weights: only records and config (DomainBed's "
                                           "--skip_model_save).")
    save_model_every_checkpoint: bool = setting(False, "Also keep model_step<N>.safetensors at every checkpoint "
                                                       "(DomainBed's --save_model_every_checkpoint).")
    keep_resume: bool = setting(False, "Keep resume.pt after the run finished (to --extend it later).")
    extend: bool = setting(False, "Continue the run in --output-dir, finished or not, to a larger --steps (all else "
                                  "equal); a finished run needs the resume.pt that --keep-resume kept.")
    on_nonfinite_loss: str = setting(
        "stop", "A training loss that is NaN or infinite: stop (exit 3, naming the step and the loss terms; no "
                "record of it is written) or continue (DomainBed's behaviour).", choices=("stop", "continue"))
    tensorboard: bool = setting(False, "Also log scalars to <output-dir>/tensorboard.")
    wandb: bool = setting(False, "Also log to Weights & Biases (the wandb extra): every record's numbers at its step, "
                                 "the config as parameters; a resumed run continues its W&B run (WANDB_MODE=offline "
                                 "needs no network).")
    wandb_project: str | None = setting(None, "W&B project [WANDB_PROJECT, else dgmoe].")
    wandb_entity: str | None = setting(None, "W&B entity [WANDB_ENTITY, else W&B's default].")
    wandb_name: str | None = setting(None, "W&B run name [WANDB_NAME, else --label, else the run folder's name].")
    mlflow: bool = setting(False, "Also log to MLflow (the mlflow extra): every record's numbers at its step, the "
                                  "config as parameters; a resumed run continues its MLflow run.")
    mlflow_uri: str | None = setting(None, "MLflow tracking URI or folder [MLFLOW_TRACKING_URI, else ./mlruns, a "
                                           "local file store].")
    mlflow_experiment: str | None = setting(None, "MLflow experiment [MLFLOW_EXPERIMENT_NAME, else dgmoe].")
    progress: str = setting("auto", "Progress display: auto = a bar on a terminal, else lines.",
                            choices=("auto", "bar", "lines", "none"))
    log_every_s: float = setting(20.0, "Seconds between progress lines when the display is lines (logs, Slurm, "
                                       "sweep jobs); 0 = one line per checkpoint.", minimum=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        why = unfit_for_a_label(self.label or "")
        if why:  # a table row is one line: a newline in a name would cut the row, U+202E would reverse it
            raise ConfigError(f"--label must be one line of text; {self.label!r} {why}")
        for knob, switch in self.NEEDS.items():  # a tracker's setting without the tracker would log nothing
            if getattr(self, knob) is not None and not getattr(self, switch):
                raise ConfigError(f"{flag(knob)} says where {flag(switch)} logs, and {flag(switch)} is not given: "
                                  f"add {flag(switch)}")
        if self.skip_model_save and self.save_model_every_checkpoint:
            raise ConfigError("--skip-model-save keeps no weights and --save-model-every-checkpoint keeps them at "
                              "every checkpoint; give one of them")


@dataclass(frozen=True)
class RunConfig:
    """One DomainBed run: a dataset with held-out test domains, a backbone and a DG algorithm.

    Seeds keep DomainBed's meaning: `trial_seed` fixes the in/out splits, `hparams_seed` picks the
    hyperparameters (0 = defaults), `seed` drives initialisation, batches, augmentation and noise.
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    seeds: SeedConfig = field(default_factory=SeedConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)

    EXECUTION: ClassVar[str] = "execution"
    #: a section whose flags follow another section's key in the flat order: the `peft` knobs stay after
    #: --pretrained-antialias, where they stood as model settings (`--help`, records' `args`, command lines)
    FLAGS_AFTER: ClassVar[dict[str, str]] = {"peft": "pretrained_antialias"}

    @classmethod
    def sections(cls) -> dict[str, type]:
        return {f.name: f.default_factory for f in dataclasses.fields(cls)}  # type: ignore[misc]

    @classmethod
    def flag_fields(cls) -> list[tuple[str, type, dataclasses.Field]]:
        """(section, its class, field) of every run setting in flag order: the sections' fields in declaration
        order, a section of `FLAGS_AFTER` placed after the key it names."""
        after = {key: section for section, key in cls.FLAGS_AFTER.items()}
        sections, out = cls.sections(), []

        def add(section: str) -> None:
            for f in dataclasses.fields(sections[section]):
                out.append((section, sections[section], f))
                if key_of(f) in after:
                    add(after[key_of(f)])

        for section in sections:
            if section not in cls.FLAGS_AFTER:
                add(section)
        return out

    @classmethod
    def keys(cls) -> dict[str, tuple[str, str]]:
        """Every flat key and the (section, field) it names, in flag order (`flag_fields`)."""
        return {key_of(f): (section, f.name) for section, _, f in cls.flag_fields()}

    # -- the flat view: one key per flag, DomainBed's `args` ---------------------------------------------------
    def flat(self) -> dict[str, Any]:
        return {key: plain(getattr(getattr(self, s), name)) for key, (s, name) in self.keys().items()}

    @classmethod
    def from_flat(cls, values: Mapping[str, Any] | None = None, base: "RunConfig | None" = None,
                  **more: Any) -> "RunConfig":
        """A config from flat keys (`dataset=`, `model=`, `steps=`, ...) over `base` (default: defaults)."""
        values = {**(values or {}), **more}
        keys = cls.keys()
        unknown = [k for k in values if k not in keys]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(keys), n=1)
            raise ConfigError(f"unknown run setting {flag(unknown[0])}"
                              + (f"; did you mean {flag(close[0])}?" if close else ""))
        base = base or cls()
        changes: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            section, name = keys[key]
            changes.setdefault(section, {})[name] = value
        return dataclasses.replace(base, **{s: dataclasses.replace(getattr(base, s), **c)
                                            for s, c in changes.items()})

    def replace(self, **flat: Any) -> "RunConfig":
        return self.from_flat(flat, base=self)

    def to_argv(self, always: Iterable[str] = ()) -> list[str]:
        """The `dgmoe train` flags that describe this run: every setting that differs from its default, and
        those named in `always`."""
        defaults, argv, always = RunConfig().flat(), [], set(always)
        for key, value in self.flat().items():
            if value == defaults[key] and key not in always:
                continue
            if isinstance(value, bool):
                argv.append(flag(key) if value else "--no-" + flag(key)[2:])
            elif isinstance(value, list):
                for item in value:
                    argv += [flag(key), str(item)]
            elif isinstance(value, dict):
                argv += [flag(key), json.dumps(value, sort_keys=True)]
            elif value is not None:
                argv += [flag(key), str(value)]
        return argv

    # -- the nested view: config.json --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {s: {f.name: plain(getattr(getattr(self, s), f.name)) for f in dataclasses.fields(getattr(self, s))}
                for s in self.sections()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], strict: bool = True) -> "RunConfig":
        """From `to_dict()`'s nested form, or from the flat form of run folders written before dgmoe 0.2
        (migrated here). `strict=False` drops settings this dgmoe no longer knows (reading old runs), with a
        warning naming them."""
        sections = cls.sections()
        if not any(isinstance(d.get(s), Mapping) for s in sections):
            flat = dict(d) if strict else {k: v for k, v in d.items() if k in cls.keys()}
            _warn_dropped([k for k in d if k not in flat])
            return cls.from_flat(flat)
        d = _peft_in_its_section(d)
        unknown = [k for k in d if k not in sections]
        if unknown and strict:
            raise ConfigError(f"unknown section {unknown[0]!r} in a run config; expected {', '.join(sections)}")
        built, dropped = {}, list(unknown)
        for s, kind in sections.items():
            given = dict(d.get(s) or {})
            names = {f.name for f in dataclasses.fields(kind)}
            extra = [k for k in given if k not in names]
            if extra and strict:
                close = difflib.get_close_matches(extra[0], list(names), n=1)
                raise ConfigError(f"unknown setting {s}.{extra[0]} in a run config"
                                  + (f"; did you mean {s}.{close[0]}?" if close else ""))
            dropped += [f"{s}.{k}" for k in extra]
            built[s] = kind(**{k: v for k, v in given.items() if k in names})
        _warn_dropped(dropped)
        return cls(**built)

    @classmethod
    def from_file(cls, path: str | Path) -> "RunConfig":
        """A run's `config.json` (its "config" object), or a file holding a config alone (nested or flat); a
        run's records (`results.jsonl`) are named as such, with the config.json beside them to pass instead."""
        if Path(path).suffix == ".jsonl":
            beside = Path(path).parent / "config.json"
            hint = f"pass {beside}" if beside.is_file() else "pass the run's config.json"
            raise ConfigError(f"--config {path} holds a run's records (JSON lines), not a run config: {hint}")
        return config_from_file(cls, path, unwrap="config",
                                expected="a JSON object (a run config or a run's config.json)")

    # -- identity ----------------------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What makes two runs the same run: every section but `execution`."""
        d = self.to_dict()
        d.pop(self.EXECUTION)
        return d

    def identity_hash(self) -> str:
        """md5 of the sorted-key JSON of the identity settings that differ from their defaults (the job id of a
        sweep, as DomainBed names a job by the arguments it was given). Leaving defaults out keeps job ids
        stable when a later dgmoe adds a setting: the new setting sits at its default in every old job."""
        defaults = _hashed(RunConfig().identity())
        given = {section: changed for section, values in _hashed(self.identity()).items()
                 if (changed := {k: v for k, v in values.items() if v != defaults[section][k]})}
        return hashlib.md5(json.dumps(given, sort_keys=True).encode("utf-8")).hexdigest()


def _peft_in_its_section(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A nested run config written before PEFT had its own section (its knobs `model.peft`, `model.peft_rank`,
    ..., named by their flat keys) in today's layout."""
    model, names = d.get("model"), {key_of(f): f.name for f in dataclasses.fields(PeftConfig)}
    if not isinstance(model, Mapping) or not names.keys() & model.keys():
        return d
    moved = {names[k]: v for k, v in model.items() if k in names}
    return {**d, "model": {k: v for k, v in model.items() if k not in names},
            "peft": {**moved, **dict(d.get("peft") or {})}}


def _hashed(identity: dict[str, Any]) -> dict[str, Any]:
    """An identity as job ids hash it: the `peft` knobs among the model's by their flat keys, as they stood
    before PEFT had its own section, so that a sweep's PEFT jobs keep their ids."""
    peft = identity.pop("peft")
    identity["model"] = {**identity["model"], **{key_of(f): peft[f.name] for f in dataclasses.fields(PeftConfig)}}
    return identity


def _warn_dropped(names: list[str]) -> None:
    if names:
        warnings.warn(f"a run config holds settings this dgmoe does not know, ignored: {', '.join(names)}",
                      stacklevel=3)


def identity_differences(a: RunConfig, b: RunConfig) -> list[str]:
    """The flat keys in which two runs' identities differ."""
    fa, fb = a.flat(), b.flat()
    execution = {key_of(f) for f in dataclasses.fields(ExecutionConfig)}
    return [k for k in fa if k not in execution and fa[k] != fb[k]]
