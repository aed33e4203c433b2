"""Loading timm/DeiT checkpoints from local files into dgmoe models (GMoE App. C.2), and the foundation
models' own formats (OpenAI/OpenCLIP, Hugging Face CLIP and DINOv2, DINOv2 hub), first mapped to timm's names
by their declared key maps (`dgmoe.models.checkpoint_formats`; the report says the format, what was dropped,
how tensors were converted and the activation, checked against what the file states: `dgmoe.models.flavour`).
A file no format matches that does not fit is refused naming the closest format and what differs.

Safe by construction: `.safetensors` through safetensors, `.pth`/`.pt`/`.bin` through
`torch.load(weights_only=True)`, so no arbitrary object is ever unpickled. Loading is strict: every key
must be accounted for. The only tolerated differences are reported in a `LoadReport`:
- each MoE block's dense `mlp.fc1/fc2` is copied into every expert, and into MoGE's shared expert (`expanded`);
- what a dense checkpoint cannot hold keeps the model's own initialisation and is listed as "initialised, not
  in the checkpoint" (`initialised`, see `no_dense_value`): in each expanded block everything the FFN does not
  fill (the router, MoGE's gate logit g = logit(gamma_init), anything a sparse layer adds), and the top-level
  modules a sparse or located family adds to the dense ViT (MoGE's and ERM+LE's location encoder);
- a classifier head with another class count is re-initialised (`reinitialized`), and a checkpoint without
  any classifier (a CLIP or DINOv2 tower, a timm `num_classes=0` file) leaves the model's own (`initialised`);
- a position embedding for another grid is resampled bicubically, and a patch embedding kernel for
  another patch size with FlexiViT's pseudo-inverse resize (`resized`, `resize_method`); antialiased as
  timm >= 0.9 by default, `antialias=False` for timm 0.5-0.6's plain bicubic (`dgmoe.models.resample`).
Anything else (an unexpected key, a missing key the checkpoint could hold, a shape mismatch) raises
`CheckpointMismatchError` naming the first offending key.

`load_checkpoint` is timm's `create_model(checkpoint_path=...)`: the file is the model's own state dict
(e.g. a fine-tuned run's weights) and loads as-is, with no adaptation and the same strict checks and errors.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection

import torch
import torch.nn as nn

from dgmoe import names
from dgmoe.errors import UsageError
from dgmoe.models.checkpoint_formats import closest_format, convert
from dgmoe.models.resample import RESIZE_METHODS, PosResample, resample_patch_embed, resize_pos_embed
from dgmoe.moe.auxiliary import sparse_layers

log = logging.getLogger(__name__)


class CheckpointError(UsageError):
    """A checkpoint file that is missing, unreadable or not a state dict."""


class CheckpointMismatchError(UsageError):
    """A checkpoint whose keys or shapes do not fit the model."""


@dataclass
class LoadReport:
    path: str
    expanded: list[str] = field(default_factory=list)
    initialised: list[str] = field(default_factory=list)  # modules/parameters kept at the model's initialisation
    reinitialized: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    resize_method: str | None = None  # how `resized` tensors were resampled (`RESIZE_METHODS`)
    format: str = "timm"  # the checkpoint format read (`dgmoe.models.checkpoint_formats`)
    dropped: list[str] = field(default_factory=list)  # the file's keys that are not the image tower's
    converted: list[str] = field(default_factory=list)  # how the format's tensors were mapped to timm's
    activation: str | None = None  # the FFN activation, stated by the file or assumed (`dgmoe.models.flavour`)
    regridded: tuple[int, int, int] | None = None  # pos_embed's grid side in the file, in the model; file's patch
    written_later: dict[str, str] = field(default_factory=dict)  # module -> what writes it after the load

    def summary(self) -> str:
        parts = [f"loaded {self.path}"]
        if self.format != "timm":
            parts.append(f"read as {self.format}")
        if self.dropped:
            parts.append(f"dropped (not the image tower): {', '.join(self.dropped)}")
        if self.converted:
            parts.append(f"converted: {'; '.join(self.converted)}")
        if self.activation:
            parts.append(f"activation: {self.activation}")
        if self.expanded:
            parts.append(f"copied dense FFN into experts: {', '.join(self.expanded)}")
        if self.initialised:
            parts.append(f"initialised, not in the checkpoint: {', '.join(self.initialised)}")
        parts += [f"{name}: written next from {what}" for name, what in self.written_later.items()]
        if self.reinitialized:
            parts.append(f"re-initialised (class count differs): {', '.join(self.reinitialized)}")
        if self.resized:
            parts.append(f"resampled to the model's grid/patch size, {self.resize_method}: {', '.join(self.resized)}"
                         + (" (grid {0}x{0} -> {1}x{1})".format(*self.regridded[:2]) if self.regridded else ""))
        return "; ".join(parts)


OFFLINE_HELP = names.OFFLINE_HELP


def missing_checkpoint(source: object, model: str | None = None) -> CheckpointError:
    """The error for a `pretrained` value that is not a checkpoint file, with what to do instead for `model` (its
    words: `dgmoe.names.missing_checkpoint_message`, which `dgmoe train` also answers before torch starts)."""
    return CheckpointError(names.missing_checkpoint_message(source, model))


#: where a `.pth` holds its state dict, first found wins: `pretrained` (DeiT's 'model' first) and, as timm's
#: `load_checkpoint(use_ema=True)` for `checkpoint_path`, the EMA weights first.
STATE_KEYS = ("model", "state_dict", "model_ema")
EMA_FIRST_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model")
#: wrapper prefixes timm strips from keys (DDP, torch.compile)
WRAPPER_PREFIXES = ("_orig_mod.", "module.", "_orig_mod.")


def _unwrapped(key: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        key = key.removeprefix(prefix)
    return key


def load_checkpoint_file(path: str | Path, keys: tuple[str, ...] = STATE_KEYS) -> dict[str, torch.Tensor]:
    """Read a state dict from `.safetensors`, `.pth`/`.pt`/`.bin` (optionally under one of `keys`), with
    DDP/torch.compile key prefixes removed as timm does, or raise `CheckpointError` naming the file (a new dict
    each call: callers rename keys)."""
    path = Path(path)
    if not path.is_file():
        raise missing_checkpoint(path)
    state = read_state_file(path)
    for key in keys:
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            log.info(f"{path}: the state dict under {key!r}")
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors")
    return {_unwrapped(k): v for k, v in state.items()}


def read_state_file(path: Path) -> Any:
    """The object a checkpoint file holds (a state dict, or a checkpoint holding one under a key): the one place
    dgmoe reads a pretrained file from disk."""
    state: Any
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        elif path.suffix == ".npz":
            raise CheckpointError(f"{path}: .npz (big_vision/JAX) checkpoints are not supported; convert to "
                                  ".safetensors or .pth first")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as exc:  # corrupt file, pickle with objects, truncated archive...
        reason = " ".join(str(exc).split())  # torch's own text runs to paragraphs: its first words say enough
        if "TorchScript" in reason:  # OpenAI's CLIP releases: code dgmoe does not run
            raise CheckpointError(f"{path} is a TorchScript archive (as OpenAI's CLIP .pt releases), which dgmoe "
                                  "does not load: save its state dict first, torch.save(torch.jit.load(path, "
                                  "map_location='cpu').state_dict(), 'clip.pth'), and pass that file") from None
        reason = reason if len(reason) <= 80 else reason[:77] + "..."
        raise CheckpointError(f"cannot read checkpoint {path}: not a .safetensors or .pth/.pt/.bin state dict "
                              f"({type(exc).__name__}: {reason})") from exc
    return state


def adapt_state_dict(model: nn.Module, state: dict[str, torch.Tensor], report: LoadReport,
                     antialias: bool = True, pos: PosResample | None = None) -> dict[str, torch.Tensor]:
    """Map a dense timm checkpoint onto `model` (experts, head, position and patch embedding). `pos`: the
    checkpoint format's own position-embedding resampling, instead of `antialias`'s (DINOv2's hub files)."""
    state = dict(state)
    for name, layer in sparse_layers(model).items():
        if f"{name}.fc1.weight" in state:
            layer.expand_dense_ffn(name, state)
            report.expanded.append(name)
    own = model.state_dict()
    _resample_embeddings(model, state, own, report, antialias, pos)
    net: Any = model  # duck-typed: dgmoe's `info`, timm's `get_classifier`
    classifier = net.info.classifier if hasattr(net, "info") else "head"
    keys = (f"{classifier}.weight", f"{classifier}.bias")
    if any(k in state and k in own and state[k].shape != own[k].shape for k in keys):  # the whole head, not half
        for key in keys:
            if key in state and key in own:
                state.pop(key)
                report.reinitialized.append(key)
    head = net.get_classifier() if hasattr(net, "get_classifier") else None
    if report.reinitialized and isinstance(head, nn.Linear):
        nn.init.trunc_normal_(head.weight, std=0.02)
        nn.init.zeros_(head.bias)
    return state


def _resample_embeddings(model: nn.Module, state: dict[str, torch.Tensor], own: dict[str, torch.Tensor],
                         report: LoadReport, antialias: bool, pos: PosResample | None = None) -> None:
    """Resample the patch kernel to the model's patch size and the position embedding to its grid.

    A position embedding with as many tokens as the model's is taken to be on the model's grid; any other
    is taken to be square (timm's assumption too).
    """
    key = "patch_embed.proj.weight"
    patch = int(state[key].shape[-1]) if key in state and state[key].ndim == 4 else 0  # the checkpoint's
    if key in state and key in own and state[key].ndim == own[key].ndim == 4 \
            and state[key].shape[:2] == own[key].shape[:2] and state[key].shape[2:] != own[key].shape[2:]:
        state[key] = resample_patch_embed(state[key], tuple(own[key].shape[2:]), antialias)
        report.resized.append(key)
    if "pos_embed" in state and "pos_embed" in own and state["pos_embed"].shape != own["pos_embed"].shape:
        vit: Any = model  # a ViT: patch_embed.grid_size, num_prefix_tokens
        prefix = getattr(vit, "pos_prefix_tokens", vit.num_prefix_tokens)
        side = math.isqrt(max(state["pos_embed"].shape[1] - prefix, 0))  # (a square grid, as resized)
        try:
            state["pos_embed"] = resize_pos_embed(
                state["pos_embed"], vit.patch_embed.grid_size, prefix,
                antialias if pos is None else pos.antialias, offset=0.0 if pos is None else pos.offset)
        except ValueError as err:
            raise CheckpointMismatchError(f"{report.path}: pos_embed: {err}") from None
        report.resized.append("pos_embed")
        report.regridded = (side, vit.patch_embed.grid_size[0], patch)
    if report.resized:
        report.resize_method = RESIZE_METHODS[antialias]
        if pos is not None and "pos_embed" in report.resized:
            report.resize_method = pos.label if report.resized == ["pos_embed"] else \
                f"{RESIZE_METHODS[antialias]}; pos_embed: {pos.label}"


def resolve_checkpoint(source: str | Path, model: str | None = None) -> Path:
    """A local path, or `hf-hub:<repo_id>[/<filename>]` fetched with the optional `huggingface_hub`
    (default filename `model.safetensors`; online only, cached by huggingface_hub). A refusal says how to get the
    registered `model`'s weights (`dgmoe.names.weights_help`)."""
    source = str(source)
    if not source.startswith("hf-hub:"):
        return Path(source)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise CheckpointError(f"{source} is a Hugging Face Hub name and the optional 'hub' extra is not installed; "
                              f"{names.weights_help(model)}") from exc
    repo, _, filename = source[len("hf-hub:"):].partition("@")
    parts = repo.split("/")
    if len(parts) > 2:
        repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        return Path(hf_hub_download(repo, filename or "model.safetensors"))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise CheckpointError(f"cannot fetch {source} ({type(exc).__name__}: {first}); {names.weights_help(model)}"
                              ) from exc


def load_pretrained(model: nn.Module, path: str | Path, strict: bool = True, antialias: bool = True,
                    allow_activation_mismatch: bool = False, name: str | None = None,
                    raw: dict[str, torch.Tensor] | None = None) -> LoadReport:
    """Load a checkpoint into `model` (see module docstring for what is tolerated).

    `antialias` chooses how position and patch embeddings are resampled: True as timm >= 0.9, False as
    timm 0.5-0.6 (plain bicubic; the GMoE authors' code). A ViT tower's FFN activation is checked against what
    the file or its folder states (`dgmoe.models.flavour`): a mismatch is refused, or with
    `allow_activation_mismatch` loaded with a warning. `name`: the registered model's, for the words of a
    refusal (how to get its weights). `raw`: the file's state dict already read (`load_checkpoint_file`), as a
    build that reads one full CLIP file for both towers passes it.
    """
    path = resolve_checkpoint(path, name)
    report = LoadReport(str(path))
    raw = load_checkpoint_file(path) if raw is None else raw
    fmt, state, report.dropped, report.converted = convert(raw, set(model.state_dict()))
    report.format = fmt.name
    _check_activation(model, path, raw, fmt.name, report, allow_activation_mismatch)
    try:  # a mismatch names the format read, or for a file no format's markers match, the closest one
        pos = fmt.pos_resample(state) if fmt.pos_resample is not None else None
        try:
            state = adapt_state_dict(model, state, report, antialias, pos)
        except KeyError as e:  # a dense FFN with fc1 but not all of fc1/fc2's weight and bias
            raise CheckpointMismatchError(f"{path}: missing key {e.args[0]!r} (a sparse block's dense FFN is "
                                          "incomplete)") from None
        except (ValueError, RuntimeError) as e:
            if isinstance(e, CheckpointError | CheckpointMismatchError):
                raise
            raise CheckpointMismatchError(f"{path}: cannot adapt it to {type(model).__name__}: {e}") from e
        own = model.state_dict()
        missing = [k for k in own if k not in state]
        initialised = no_dense_value(model, state, report.expanded)
        classifier = getattr(getattr(model, "info", None), "classifier", "head")
        head_keys = [k for k in own if k.startswith(f"{classifier}.")]
        if not any(k in state or k in report.reinitialized for k in head_keys):  # a backbone's file: no classifier
            later = getattr(getattr(model, classifier, None), "written_from", None)  # a zero-shot head's text tower
            report.written_later.update({classifier: later} if later else {})
            initialised.update({} if later else {k: classifier for k in head_keys})
        written = {k for k in own if k.split(".", 1)[0] in report.written_later}
        check_fit(path, own, state, tolerated={*initialised, *report.reinitialized, *written} if strict
                  else set(missing))
    except CheckpointMismatchError as e:
        note = closest_format(raw, set(model.state_dict())) if fmt.name == "timm" else \
            f"read as {fmt.label}: is it this model's family?"
        raise CheckpointMismatchError(f"{e} ({note})") from None
    report.initialised = list(dict.fromkeys(initialised.values()))
    # Keys without a checkpoint value keep the model's own (initial) tensors, so the load itself is strict.
    model.load_state_dict({**{k: own[k] for k in missing}, **state}, strict=True)
    # the report is information (experts copied, a new head, formats converted: what a load does); a model built
    # at another size than its registered one warns when its checkpoint is resampled (`create_model`)
    log.info(report.summary())
    return report


def _check_activation(model: nn.Module, path: Path, raw: dict[str, torch.Tensor], fmt: str, report: LoadReport,
                      allow: bool) -> None:
    """Refuse (or with `allow`, warn about) a ViT tower whose activation is not the one the file states; the
    report says the activation when a file states one or when a foundation format's was assumed."""
    from dgmoe.models.flavour import check_activation

    info: Any = getattr(model, "info", None)
    if getattr(info, "family", None) != "vit":
        return
    said, problem = check_activation(path, raw, info.architecture, info.activation)
    if problem is not None and not allow:
        raise CheckpointMismatchError(f"{problem} (create_model's allow_activation_mismatch=True, on the command "
                                      "line --model-kwargs '{\"allow_activation_mismatch\": true}', loads it anyway)")
    if problem is not None:
        log.warning(f"{problem}; loaded anyway (allow_activation_mismatch)")
    if fmt != "timm" or "stated by" in said or problem is not None:
        report.activation = said


def no_dense_value(model: nn.Module, state: dict[str, torch.Tensor], expanded: Collection[str]) -> dict[str, str]:
    """The model's keys that the dense checkpoint `state` (adapted: `expanded` are the sparse blocks whose dense
    FFN it held) cannot hold, each mapped to the module or parameter the load report names for it:

    - in an expanded block, every key the dense FFN does not fill: the router, MoGE's gate logit (eq. 1), any
      parameter a sparse layer adds (a block whose checkpoint value is not a dense FFN stays strict);
    - a top-level module or parameter that the dense ViT does not build (not in the model's `dense_names`:
      MoGE's location encoder phi, ERM+LE's location MLP, anything a family adds), when the checkpoint holds
      none of its keys (a checkpoint holding part of it stays strict).

    These keep the model's own initialisation; every other key must come from the checkpoint.
    """
    own = model.state_dict()
    dense_names = getattr(model, "dense_names", None)
    in_checkpoint = {k.split(".", 1)[0] for k in state}
    added = set() if dense_names is None else {k.split(".", 1)[0] for k in own} - set(dense_names) - in_checkpoint
    out = {}
    for key in own:
        if key in state:
            continue
        top = key.split(".", 1)[0]
        layer = next((name for name in expanded if key.startswith(name + ".")), None)
        if top in added:
            out[key] = top
        elif layer is not None:
            out[key] = f"{layer}.{key[len(layer) + 1:].split('.', 1)[0]}"
    return out


def check_fit(path: str | Path, own: dict[str, torch.Tensor], state: dict[str, torch.Tensor],
              tolerated: Collection[str] = ()) -> None:
    """Raise `CheckpointMismatchError` at the first shape mismatch (in the model's order), unexpected key or
    missing key that is not `tolerated`."""
    for key, tensor in own.items():
        if key in state and state[key].shape != tensor.shape:
            raise CheckpointMismatchError(f"{path}: shape mismatch at {key!r}: checkpoint "
                                          f"{tuple(state[key].shape)} vs model {tuple(tensor.shape)}")
    unexpected = [k for k in state if k not in own]
    unexplained = [k for k in own if k not in state and k not in tolerated]
    missing = (f"missing key {unexplained[0]!r} ({len(unexplained)} model keys have no value in the checkpoint)"
               if unexplained else "")
    if unexpected:  # with missing keys too: a checkpoint of another family, both named
        raise CheckpointMismatchError(f"{path}: {missing + ' and ' if missing else ''}unexpected key "
                                      f"{unexpected[0]!r} (not in the model; {len(unexpected)} unexpected keys)")
    if unexplained:
        raise CheckpointMismatchError(f"{path}: {missing}")


def load_checkpoint(model: nn.Module, path: str | Path) -> LoadReport:
    """timm's `create_model(checkpoint_path=path)`: the file's state dict loaded into `model` as-is and
    strictly (every key, every shape; EMA weights first when the file holds them, as timm's
    `load_checkpoint`). Unlike `load_pretrained`, nothing is adapted: no experts from a dense FFN, no new
    head, no resampled embeddings. A local file only."""
    if str(path).startswith("hf-hub:"):
        raise CheckpointError(f"checkpoint_path must be a local file, got {str(path)!r}; for hub weights: "
                              f"{OFFLINE_HELP}")
    state = load_checkpoint_file(path, EMA_FIRST_KEYS)
    check_fit(path, model.state_dict(), state)
    model.load_state_dict(state, strict=True)
    report = LoadReport(str(path))
    log.info(report.summary())
    return report
