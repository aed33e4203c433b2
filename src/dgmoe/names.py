"""What `dgmoe train` checks before torch is imported, so that a typo or a missing file answers at once (a
torch start costs several CPU-seconds, minutes on a loaded login node): model, algorithm and dataset names,
a dataset's domains for `--test-envs`, and the words of the errors that name a missing checkpoint file.

The registries (`dgmoe.models.MODELS`, `dgmoe.algorithms.ALGORITHMS`, `dgmoe.data.catalogue.DATASETS`) fill
up as torch-heavy modules are imported; the block below is derived from them, never edited by hand:
`tests/test_names.py` checks that it equals them and rewrites it (`DGMOE_UPDATE_NAMES=1 python -m pytest
tests/test_names.py`). The lookups raise the registries' own errors (`Registry.get`: "unknown model 'x'.
Did you mean: ...?"), so an answer reads the same before torch starts as after.
"""
from __future__ import annotations

import sys
from typing import Sequence

from dgmoe.errors import UsageError
from dgmoe.registry import Registry, UnknownNameError

HUB_PREFIXES = ("hf-hub:", "hf_hub:")
OFFLINE_HELP = ("dgmoe loads pretrained weights from local files only and downloads nothing at run time. Fetch "
                "them once with `dgmoe weights get NAME --to DIR` (e.g. deit_small_patch16_224; `dgmoe weights get "
                "--list` names them), which prints the --pretrained argument to pass (hf-hub:<repo> also works "
                "online with the 'hub' extra)")


# --- derived from the registries by tests/test_names.py (DGMOE_UPDATE_NAMES=1); do not edit by hand ---
MODEL_NAMES: tuple[str, ...] = (
    'deit_base_patch16_224', 'deit_small_patch16_224', 'deit_tiny_patch16_224', 'gmoe_base_patch14_dinov2',
    'gmoe_base_patch14_reg4_dinov2', 'gmoe_base_patch16_224', 'gmoe_base_patch16_clip_224',
    'gmoe_base_patch16_clip_quickgelu_224', 'gmoe_large_patch14_clip_224', 'gmoe_large_patch14_clip_quickgelu_224',
    'gmoe_micro_patch7_28', 'gmoe_micro_patch7_clip_28', 'gmoe_micro_patch7_clip_quickgelu_28',
    'gmoe_small_patch14_dinov2', 'gmoe_small_patch14_reg4_dinov2', 'gmoe_small_patch16_224', 'gmoe_tiny_patch16_224',
    'hybrid_sfmoe_small_r26_s32_224', 'moge_small_patch16_224', 'moge_tiny_patch16_224', 'resnet101', 'resnet50',
    'sfmoe_base_patch14_dinov2', 'sfmoe_base_patch16_clip_224', 'sfmoe_base_patch16_clip_quickgelu_224',
    'sfmoe_small_patch14_dinov2', 'sfmoe_small_patch16_224', 'vit_base_patch14_dinov2',
    'vit_base_patch14_reg4_dinov2', 'vit_base_patch16_224', 'vit_base_patch16_clip_224',
    'vit_base_patch16_clip_quickgelu_224', 'vit_large_patch14_clip_224', 'vit_large_patch14_clip_quickgelu_224',
    'vit_le_tiny_patch16_224', 'vit_micro_patch7_28', 'vit_micro_patch7_clip_28',
    'vit_micro_patch7_clip_quickgelu_28', 'vit_micro_patch7_dinov2', 'vit_micro_patch7_reg4_dinov2',
    'vit_small_patch14_dinov2', 'vit_small_patch14_reg4_dinov2', 'vit_small_patch16_224', 'vit_small_r26_s32_224',
    'vit_tiny_patch16_224',
)
ALGORITHM_NAMES: tuple[str, ...] = (
    'ADRMX', 'ANDMask', 'ARM', 'CAD', 'CDANN', 'CLIPood', 'CORAL', 'CausIRL_CORAL', 'CausIRL_MMD', 'CondCAD', 'D3G',
    'D3G_WRAP', 'DANN', 'EQRM', 'ERM', 'ERMPlusPlus', 'FLYP', 'Fish', 'Fishr', 'GroupDRO', 'IB_ERM', 'IB_IRM', 'IGA',
    'IRM', 'LPFT', 'MIRO', 'MLDG', 'MMD', 'MTL', 'Mixup', 'MoGE', 'RDM', 'RSC', 'SANDMask', 'SD', 'SMA', 'SWAD',
    'SagNet', 'SelfReg', 'TRM', 'Transfer', 'URM', 'VREx',
)
#: catalogue dataset -> (its domains, () when the folder names them; its evaluation-only domains)
DATASET_DOMAINS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    'CUBDG': (('Candy', 'Mosaic', 'Natural', 'Udnie'), ()),
    'Camelyon17': (('hospital_0', 'hospital_1', 'hospital_2', 'hospital_3', 'hospital_4'), ()),
    'ColoredMNIST': (('+90%', '+80%', '-90%'), ()),
    'Debug224': (('0', '1', '2'), ()),
    'Debug28': (('0', '1', '2'), ()),
    'DomainNet': (('clipart', 'infograph', 'painting', 'quickdraw', 'real', 'sketch'), ()),
    'DomainNet-OOP': (('clipart', 'infograph', 'painting', 'quickdraw', 'real', 'sketch'), ()),
    'FMoW': ((
        'train/Asia', 'train/Europe', 'train/Africa', 'train/Americas', 'train/Oceania', 'id_val', 'id_test', 'val',
        'test',
    ), ('id_val', 'id_test', 'val', 'test')),
    'FMoW-LAO': ((
        'train/Europe', 'train/Africa', 'train/Americas', 'train/Oceania', 'id_val', 'id_test', 'val_asia',
        'test_asia',
    ), ('id_val', 'id_test', 'val_asia', 'test_asia')),
    'GeoMNIST': ((
        'NorthAmerica', 'SouthAmerica', 'Europe', 'Africa', 'Asia', 'NorthAmerica/test', 'CentralAmerica/test',
        'SouthAmerica/test', 'Europe/test', 'Africa/test', 'Asia/test',
    ), ()),
    'ImageFolder': ((), ()),
    'ImageNetShifts': ((
        'ImageNet', 'ImageNet-val', 'ImageNet-V2', 'ImageNet-R', 'ImageNet-Sketch', 'ImageNet-A', 'ObjectNet',
    ), ('ImageNet-val', 'ImageNet-V2', 'ImageNet-R', 'ImageNet-Sketch', 'ImageNet-A', 'ObjectNet')),
    'NICOpp': (('autumn', 'dim', 'grass', 'outdoor', 'rock', 'water'), ()),
    'OfficeHome': (('Art', 'Clipart', 'Product', 'Real World'), ()),
    'OfficeHome-OOP': (('Art', 'Clipart', 'Product', 'Real World'), ()),
    'PACS': (('art_painting', 'cartoon', 'photo', 'sketch'), ()),
    'PACS-OOP': (('art_painting', 'cartoon', 'photo', 'sketch'), ()),
    'RotatedMNIST': (('0', '15', '30', '45', '60', '75'), ()),
    'SVIRO': (('aclass', 'escape', 'hilux', 'i3', 'lexus', 'tesla', 'tiguan', 'tucson', 'x5', 'zoe'), ()),
    'Sentinel2Sample': (('west', 'central', 'east'), ()),
    'SpawriousM2M_easy': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'SpawriousM2M_hard': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'SpawriousM2M_medium': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'SpawriousO2O_easy': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'SpawriousO2O_hard': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'SpawriousO2O_medium': (('Test', 'SC_group_1', 'SC_group_2'), ()),
    'TerraIncognita': (('location_100', 'location_38', 'location_43', 'location_46'), ()),
    'TerraIncognita-OOP': (('location_100', 'location_38', 'location_43', 'location_46'), ()),
    'VLCS': (('Caltech101', 'LabelMe', 'SUN09', 'VOC2007'), ()),
    'VLCS-OOP': (('Caltech101', 'LabelMe', 'SUN09', 'VOC2007'), ()),
    'WILDSFMoW': (('Asia', 'Europe', 'Africa', 'Americas', 'Oceania', 'Other'), ()),
    'iWildCam': (('train', 'id_val', 'id_test', 'val', 'test'), ('id_val', 'id_test', 'val', 'test')),
}
#: model -> the foundation tower it is built on (`dgmoe.models.foundation.Tower.label`)
MODEL_TOWERS: dict[str, str] = {
    'gmoe_base_patch14_dinov2': 'DINOv2 ViT-B/14',
    'gmoe_base_patch14_reg4_dinov2': 'DINOv2 ViT-B/14 with 4 registers',
    'gmoe_base_patch16_clip_224': 'CLIP ViT-B/16 (OpenCLIP, GELU)',
    'gmoe_base_patch16_clip_quickgelu_224': 'CLIP ViT-B/16 (OpenAI, QuickGELU)',
    'gmoe_large_patch14_clip_224': 'CLIP ViT-L/14 (OpenCLIP, GELU)',
    'gmoe_large_patch14_clip_quickgelu_224': 'CLIP ViT-L/14 (OpenAI, QuickGELU)',
    'gmoe_micro_patch7_clip_28': "CLIP-shaped micro ViT (OpenCLIP's GELU)",
    'gmoe_micro_patch7_clip_quickgelu_28': "CLIP-shaped micro ViT (OpenAI's QuickGELU)",
    'gmoe_small_patch14_dinov2': 'DINOv2 ViT-S/14',
    'gmoe_small_patch14_reg4_dinov2': 'DINOv2 ViT-S/14 with 4 registers',
    'sfmoe_base_patch14_dinov2': 'DINOv2 ViT-B/14',
    'sfmoe_base_patch16_clip_224': 'CLIP ViT-B/16 (OpenCLIP, GELU)',
    'sfmoe_base_patch16_clip_quickgelu_224': 'CLIP ViT-B/16 (OpenAI, QuickGELU)',
    'sfmoe_small_patch14_dinov2': 'DINOv2 ViT-S/14',
    'vit_base_patch14_dinov2': 'DINOv2 ViT-B/14',
    'vit_base_patch14_reg4_dinov2': 'DINOv2 ViT-B/14 with 4 registers',
    'vit_base_patch16_clip_224': 'CLIP ViT-B/16 (OpenCLIP, GELU)',
    'vit_base_patch16_clip_quickgelu_224': 'CLIP ViT-B/16 (OpenAI, QuickGELU)',
    'vit_large_patch14_clip_224': 'CLIP ViT-L/14 (OpenCLIP, GELU)',
    'vit_large_patch14_clip_quickgelu_224': 'CLIP ViT-L/14 (OpenAI, QuickGELU)',
    'vit_micro_patch7_clip_28': "CLIP-shaped micro ViT (OpenCLIP's GELU)",
    'vit_micro_patch7_clip_quickgelu_28': "CLIP-shaped micro ViT (OpenAI's QuickGELU)",
    'vit_micro_patch7_dinov2': 'DINOv2-shaped micro ViT',
    'vit_micro_patch7_reg4_dinov2': 'DINOv2-shaped micro ViT with 4 registers',
    'vit_small_patch14_dinov2': 'DINOv2 ViT-S/14',
    'vit_small_patch14_reg4_dinov2': 'DINOv2 ViT-S/14 with 4 registers',
}
#: tower -> how to get its weights as a local file (`dgmoe.models.foundation.Tower.weights`)
TOWER_WEIGHTS: dict[str, str] = {
    'CLIP ViT-B/16 (OpenAI, QuickGELU)': (
        "with open_clip, `model, _, _ = open_clip.create_model_and_transforms('ViT-B-16', pretrained='openai')` then "
        "`torch.save(model.state_dict(), 'clip.pth')`, or Hugging Face openai/clip-vit-base-patch16's weights file: "
        "both hold the image and the text tower (--head zeroshot reads both; timm's "
        'vit_base_patch16_clip_quickgelu_224.openai holds the image tower only); copy the file here and pass its path'
    ),
    'CLIP ViT-B/16 (OpenCLIP, GELU)': (
        "with open_clip, `model, _, _ = open_clip.create_model_and_transforms('ViT-B-16', "
        "pretrained='laion2b_s34b_b88k')` then `torch.save(model.state_dict(), 'clip.pth')`, or Hugging Face "
        "laion/CLIP-ViT-B-16-laion2B-s34B-b88K's weights file: both hold the image and the text tower (--head zeroshot "
        "reads both; timm's vit_base_patch16_clip_224.laion2b holds the image tower only); copy the file here and pass "
        'its path'
    ),
    'CLIP ViT-L/14 (OpenAI, QuickGELU)': (
        "with open_clip, `model, _, _ = open_clip.create_model_and_transforms('ViT-L-14', pretrained='openai')` then "
        "`torch.save(model.state_dict(), 'clip.pth')`, or Hugging Face openai/clip-vit-large-patch14's weights file: "
        "both hold the image and the text tower (--head zeroshot reads both; timm's "
        'vit_large_patch14_clip_quickgelu_224.openai holds the image tower only); copy the file here and pass its path'
    ),
    'CLIP ViT-L/14 (OpenCLIP, GELU)': (
        "with open_clip, `model, _, _ = open_clip.create_model_and_transforms('ViT-L-14', "
        "pretrained='laion2b_s32b_b82k')` then `torch.save(model.state_dict(), 'clip.pth')`, or Hugging Face "
        "laion/CLIP-ViT-L-14-laion2B-s32B-b82K's weights file: both hold the image and the text tower (--head zeroshot "
        "reads both; timm's vit_large_patch14_clip_224.laion2b holds the image tower only); copy the file here and "
        'pass its path'
    ),
    "CLIP-shaped micro ViT (OpenAI's QuickGELU)": (
        'none exist for this test-sized stand-in: run it without --pretrained (its seeded initialisation; --head '
        'zeroshot then prompts a seeded random text tower)'
    ),
    "CLIP-shaped micro ViT (OpenCLIP's GELU)": (
        'none exist for this test-sized stand-in: run it without --pretrained (its seeded initialisation; --head '
        'zeroshot then prompts a seeded random text tower)'
    ),
    'DINOv2 ViT-B/14': (
        "`torch.save(torch.hub.load('facebookresearch/dinov2', 'dinov2_vitb14').state_dict(), 'dinov2_vitb14.pth')`, "
        "or timm's `safetensors.torch.save_file(timm.create_model('vit_base_patch14_dinov2.lvd142m', "
        "pretrained=True).state_dict(), 'dinov2_vitb14.safetensors')`; copy the file here and pass its path"
    ),
    'DINOv2 ViT-B/14 with 4 registers': (
        "`torch.save(torch.hub.load('facebookresearch/dinov2', 'dinov2_vitb14_reg').state_dict(), "
        "'dinov2_vitb14_reg.pth')`, or timm's "
        "`safetensors.torch.save_file(timm.create_model('vit_base_patch14_reg4_dinov2.lvd142m', "
        "pretrained=True).state_dict(), 'dinov2_vitb14_reg.safetensors')`; copy the file here and pass its path"
    ),
    'DINOv2 ViT-S/14': (
        "`torch.save(torch.hub.load('facebookresearch/dinov2', 'dinov2_vits14').state_dict(), 'dinov2_vits14.pth')`, "
        "or timm's `safetensors.torch.save_file(timm.create_model('vit_small_patch14_dinov2.lvd142m', "
        "pretrained=True).state_dict(), 'dinov2_vits14.safetensors')`; copy the file here and pass its path"
    ),
    'DINOv2 ViT-S/14 with 4 registers': (
        "`torch.save(torch.hub.load('facebookresearch/dinov2', 'dinov2_vits14_reg').state_dict(), "
        "'dinov2_vits14_reg.pth')`, or timm's "
        "`safetensors.torch.save_file(timm.create_model('vit_small_patch14_reg4_dinov2.lvd142m', "
        "pretrained=True).state_dict(), 'dinov2_vits14_reg.safetensors')`; copy the file here and pass its path"
    ),
    'DINOv2-shaped micro ViT': (
        'none exist for this test-sized stand-in: run it without --pretrained (its seeded initialisation; --head '
        'zeroshot then prompts a seeded random text tower)'
    ),
    'DINOv2-shaped micro ViT with 4 registers': (
        'none exist for this test-sized stand-in: run it without --pretrained (its seeded initialisation; --head '
        'zeroshot then prompts a seeded random text tower)'
    ),
}
#: the CLIP image towers, which have a text tower for `--head zeroshot`
TEXT_TOWER_MODELS: tuple[str, ...] = (
    'gmoe_base_patch16_clip_224', 'gmoe_base_patch16_clip_quickgelu_224', 'gmoe_large_patch14_clip_224',
    'gmoe_large_patch14_clip_quickgelu_224', 'gmoe_micro_patch7_clip_28', 'gmoe_micro_patch7_clip_quickgelu_28',
    'sfmoe_base_patch16_clip_224', 'sfmoe_base_patch16_clip_quickgelu_224', 'vit_base_patch16_clip_224',
    'vit_base_patch16_clip_quickgelu_224', 'vit_large_patch14_clip_224', 'vit_large_patch14_clip_quickgelu_224',
    'vit_micro_patch7_clip_28', 'vit_micro_patch7_clip_quickgelu_28',
)
# --- end of the derived block ---


def weights_help(model: str | None = None) -> str:
    """How to get `model`'s pretrained weights as a local file: its tower's recipe where it is built on a
    foundation tower (a CLIP tower's: a full CLIP file, image and text towers; `MODEL_TOWERS`, `TOWER_WEIGHTS`,
    derived from `dgmoe.models.foundation.Tower.weights`), else timm's DeiT recipe (`OFFLINE_HELP`)."""
    tower = MODEL_TOWERS.get(model) if isinstance(model, str) else None
    if tower is None:
        return OFFLINE_HELP
    return (f"dgmoe loads pretrained weights from local files only and downloads nothing. {model}'s weights "
            f"({tower}): {TOWER_WEIGHTS[tower]}")


#: where each live registry lives: a process that imported it already (a test, or a script that declared its own
#: dataset, model or algorithm before calling the command line in-process) has names the block below lacks
LIVE_REGISTRIES = {"model": ("dgmoe.models", "MODELS"), "algorithm": ("dgmoe.algorithms", "ALGORITHMS"),
                   "dataset": ("dgmoe.data.catalogue", "DATASETS")}


def _light(kind: str, names: Sequence[str]) -> Registry[str]:
    """The names of `kind` as a registry (for its errors): the block's, and the live registry's where a process
    imported it already (importing it here would cost the torch start this module avoids)."""
    module, attr = LIVE_REGISTRIES[kind]
    live = getattr(sys.modules.get(module), attr, None)
    registry: Registry[str] = Registry(kind)
    for name in sorted({*names, *(live.names() if live is not None else ())}):
        registry.add(name, name)
    return registry


def check_model_name(name: str, known: Sequence[str] | Registry = MODEL_NAMES) -> None:
    """A one-line error for a timm model name that picks downloadable weights, with how to get the weights: a
    hub name ('hf-hub:timm/vit_small_patch16_224.augreg_in21k', 'timm/...') or a pretrained tag
    ('resnet50.a1_in1k'); nothing for a known name or another unknown one (the registry answers that)."""
    if not isinstance(name, str) or name in known:
        return
    bare = name
    hub = bare.startswith(HUB_PREFIXES)
    if hub:
        bare = bare.split(":", 1)[1]
    hub = hub or bare.startswith("timm/")
    bare = bare.split("/", 1)[1] if hub and "/" in bare else bare
    arch, dot, tag = bare.partition(".")
    use = f"create_model({arch!r}, pretrained=PATH)" if arch in known else "a registered name (see `dgmoe models`)"
    help = weights_help(arch if arch in known else None)
    if hub:
        raise UnknownNameError(f"model {name!r} is a Hugging Face Hub name; dgmoe builds registered models only: use "
                               f"{use}. {help}")
    if dot and arch in known:
        raise UnknownNameError(f"model {name!r}: '.{tag}' is a timm pretrained tag (it picks the weights timm "
                               f"downloads); dgmoe builds {arch!r} and loads weights from a local file: use {use}. "
                               f"{help}")


def check_model(name: str) -> None:
    """Refuse an unknown model name with the registry's own error, without torch."""
    check_model_name(name)
    _light("model", MODEL_NAMES).get(name)


def check_names(dataset: str, model: str, algorithm: str) -> None:
    """Refuse an unknown model, algorithm or dataset name with the registry's own error, without torch."""
    check_model(model)
    _light("algorithm", ALGORITHM_NAMES).get(algorithm)
    _light("dataset", list(DATASET_DOMAINS)).get(dataset)


#: the classifier heads a run may start from (`--head`): a new linear one, or CLIP's zero-shot classifier
HEADS: tuple[str, ...] = ("linear", "zeroshot")


def is_text_head(head: str) -> bool:
    """Whether `--head` asks for CLIP's zero-shot head (written from the text tower): the one place the head's
    name is compared; everything else asks a build whether it has a text head (`ModelBuild.text_head`)."""
    return head == HEADS[1]


def no_text_tower_message(model: str) -> str:
    """The words for `--head zeroshot` on a model that is not a CLIP image tower."""
    return (f"--model {model} is not a CLIP image tower, so it has no text tower for a text head; use one of "
            f"{', '.join(sorted(TEXT_TOWER_MODELS))}")


def check_text_head(model: str, head: str) -> None:
    """Refuse `--head zeroshot` on a declared model that has no text tower (a model registered at run time is
    left to the run, which knows its tower)."""
    if is_text_head(head) and model in MODEL_NAMES and model not in TEXT_TOWER_MODELS:
        raise UsageError(no_text_tower_message(model))


def test_envs_problem(name: str, domains: Sequence[str], eval_domains: Sequence[str],
                      test_envs: Sequence[int]) -> str | None:
    """What is wrong with `test_envs` for a dataset with these domains (None: nothing); the message lists the
    domains with their indices. Evaluation-only domains (WILDS' splits) must all be held out."""
    valid = ", ".join(f"{i}={d}" for i, d in enumerate(domains))
    out = []
    for t in test_envs:
        if isinstance(t, bool) or not hasattr(t, "__index__") or not 0 <= int(t) < len(domains):
            return f"test env {t!r} is out of range for {name}, which has {len(domains)} domains ({valid})"
        out.append(int(t))
    if len(set(out)) != len(out):
        return f"test envs {list(test_envs)} repeat a domain ({valid})"
    if len(out) >= len(domains):
        return f"test envs {out} leave no training domain in {name} ({valid})"
    required = [list(domains).index(d) for d in eval_domains]
    if not set(required) <= set(out):
        trained = ", ".join(f"{i}={domains[i]}" for i in required if i not in out)
        add = [i for i in required if i not in out]
        also = (f"; to hold out more domains than these, add {' '.join(f'--test-envs {i}' for i in add)}"
                if set(out) - set(required) else "")
        return (f"{name}'s domains {trained} are evaluation splits, never trained on: leave --test-envs out (by "
                f"default a run on {name} holds out exactly its evaluation splits){also} (got {out}; {valid})")
    return None


def evaluation_envs(dataset: str) -> list[int]:
    """The indices of a catalogue dataset's evaluation-only domains, which every run holds out (WILDS' evaluation
    splits; `dgmoe.data.catalogue.evaluation_envs` reads the live catalogue); [] for another name."""
    domains, eval_domains = DATASET_DOMAINS.get(dataset, ((), ()))
    return [domains.index(d) for d in eval_domains]


def check_test_envs(dataset: str, test_envs: Sequence[int]) -> None:
    """`test_envs_problem` for a catalogue dataset whose domains are declared (a folder's are checked once read)."""
    domains, eval_domains = DATASET_DOMAINS.get(dataset, ((), ()))
    problem = test_envs_problem(dataset, domains, eval_domains, test_envs) if domains else None
    if problem:
        raise UsageError(problem)


def missing_checkpoint_message(source: object, model: str | None = None) -> str:
    """The words for a `pretrained` value that is not a checkpoint file, with what to do instead: how to get
    `model`'s weights (`weights_help`)."""
    if source is True or str(source).lower() == "true":
        return f"pretrained={source!r} is timm's way to download weights; {weights_help(model)}"
    if "/" not in str(source) and "." not in str(source):  # a model or hub name, not a path
        return f"checkpoint file not found: {source} (a model name? {weights_help(model)})"
    if model in MODEL_TOWERS:  # a foundation tower's file: say where it comes from
        return f"checkpoint file not found: {source}. {weights_help(model)}"
    return f"checkpoint file not found: {source}"


def check_pretrained_file(source: str | None, model: str | None = None) -> None:
    """Refuse a `--pretrained` value that names no file (a hub name is left to the loader), saying how to get
    `model`'s weights."""
    from pathlib import Path

    if source is None or str(source).startswith(HUB_PREFIXES) or Path(source).is_file():
        return
    raise UsageError(missing_checkpoint_message(source, model))
