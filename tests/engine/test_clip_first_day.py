"""A CLIP user's first runs on a real dataset's layout, each without a silent wrong: class folders named otherwise
than the catalogue's classes are matched by name or refused (never prompted with another class's name), a 28 px
stand-in runs at its own size and a checkpoint resampled to another grid is a warning, the load report and a
class missing from a domain are dgmoe lines (info and warning) in the console's log and in train.log."""
from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from dgmoe.cli import run
from dgmoe.data.class_names import PACS as PACS_NAMES
from dgmoe.engine.config import RunConfig
from dgmoe.engine.setup import prepare_run

PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
MICRO_CLIP = "vit_micro_patch7_clip_quickgelu_28"


def pacs_tree(root: Path, rename: dict[str, str] | None = None, per_class: int = 2) -> Path:
    """A tiny PACS-shaped folder `<root>/PACS/<domain>/<class>/<image>.png` (8 px noise images), its class
    folders renamed by `rename`; returns the data dir to pass as --data-dir."""
    rename = rename or {}
    for d, domain in enumerate(PACS_DOMAINS):
        for c, name in enumerate(PACS_NAMES):
            folder = root / "PACS" / domain / rename.get(name, name)
            folder.mkdir(parents=True)
            for k in range(per_class):
                pixels = np.random.RandomState(100 * d + 10 * c + k).randint(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{k}.png")
    return root


def train(data_dir: Path, out: Path, *extra: str) -> int:
    return run(["train", "--dataset", "PACS", "--data-dir", str(data_dir), "--test-envs", "0", "--steps", "0",
                "--progress", "none", "--num-threads", "1", "--output-dir", str(out), *extra])


@pytest.fixture(autouse=True)
def _no_shared_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DGMOE_CACHE_DIR", str(tmp_path / "cache"))  # the trees here, never a prepared PACS


def test_a_class_folder_no_declared_name_fits_is_refused_naming_it(tmp_path, capsys):
    data = pacs_tree(tmp_path / "data", {"dog": "puppy", "person": "people"})
    out = tmp_path / "zs"
    assert train(data, out, "--model", MICRO_CLIP, "--head", "zeroshot") == 2
    said = capsys.readouterr()
    errors = [line for line in (said.out + said.err).splitlines() if line.startswith("dgmoe: error:")]
    assert len(errors) == 1, said
    assert errors[0].startswith("dgmoe: error: PACS: class folder(s) 'people', 'puppy' match none of the catalogue's")
    assert "unmatched: dog, person" in errors[0] and not out.exists()  # refused before anything is written


def test_class_folders_named_otherwise_are_matched_and_the_head_follows_the_loaders_labels(tmp_path, caplog):
    """'Person' sorts before 'dog': the loader's label 0 is the person folder, so the head's row 0 must be the
    text tower's "person" (today's loader labels, the catalogue's order of names would make it "dog")."""
    exact, renamed = pacs_tree(tmp_path / "exact"), pacs_tree(tmp_path / "renamed", {"person": "Person",
                                                                                     "house": "House-"})

    def head(data: Path) -> tuple[list[str], torch.Tensor]:
        cfg = RunConfig.from_flat(dataset="PACS", data_dir=str(data), model=MICRO_CLIP, head="zeroshot",
                                  prompt_templates="domainbed", steps=0, test_envs=[0], progress="none",
                                  output_dir=str(tmp_path / "unused"))
        setup = prepare_run(cfg)
        return list(setup.dataset.classes), setup.network.get_classifier().weight.detach()

    classes, rows = head(exact)
    assert classes == list(PACS_NAMES)
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        renamed_classes, renamed_rows = head(renamed)
    assert renamed_classes == ["House-", "Person", "dog", "elephant", "giraffe", "guitar", "horse"]
    order = [PACS_NAMES.index(n) for n in ("house", "person", "dog", "elephant", "giraffe", "guitar", "horse")]
    torch.testing.assert_close(renamed_rows, rows[order])  # label i's row is label i's class, by name
    assert "the prompts name them so: House- -> house, Person -> person" in caplog.text


def test_the_normalised_match_is_said_on_the_run_log_and_the_run_goes_on(tmp_path, caplog):
    data = pacs_tree(tmp_path / "data", {"dog": "Dog"})
    out = tmp_path / "zs"
    with caplog.at_level(logging.INFO, logger="dgmoe"):  # (as `dgmoe train` sets it; pytest's root is WARNING)
        assert train(data, out, "--model", MICRO_CLIP, "--head", "zeroshot") == 0
    log = (out / "train.log").read_text()
    assert "class names by case and _/-/space, the prompts name them so: Dog -> dog" in log
    config = json.loads((out / "config.json").read_text())  # and the run folder records it
    assert config["model_build"]["text_load"].endswith("(class folders matched by name: Dog -> dog)")


def test_a_28px_stand_in_on_a_224px_dataset_runs_at_its_own_size_and_says_so(tmp_path, caplog):
    data = pacs_tree(tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        assert train(data, tmp_path / "own", "--model", MICRO_CLIP) == 0
    config = json.loads((tmp_path / "own" / "config.json").read_text())
    assert config["dataset"]["input_shape"] == [3, 28, 28]
    assert train(data, tmp_path / "own", "--model", MICRO_CLIP) == 0  # the same command: the same run, done
    assert f"--model {MICRO_CLIP} is built for 28 px images: PACS is decoded at 28 px, not at the default 224 px" \
        in (tmp_path / "own" / "train.log").read_text()
    assert train(data, tmp_path / "given", "--model", MICRO_CLIP, "--img-size", "56") == 0  # a size given stands
    given = json.loads((tmp_path / "given" / "config.json").read_text())
    assert given["dataset"]["input_shape"] == [3, 56, 56]
    assert "is built for" not in (tmp_path / "given" / "train.log").read_text()


def test_a_checkpoint_resampled_to_another_grid_is_a_warning_naming_the_size_to_pass(tmp_path):
    from dgmoe.models import create_model

    data = pacs_tree(tmp_path / "data")
    weights = tmp_path / "micro.safetensors"
    save_file(create_model(MICRO_CLIP, num_classes=7).state_dict(), str(weights))
    out = tmp_path / "run"
    assert train(data, out, "--model", MICRO_CLIP, "--pretrained", str(weights), "--img-size", "56") == 0
    log = (out / "train.log").read_text()
    assert ("warning: " f"{weights}: position embedding resampled from the checkpoint's 4x4 grid to the model's 8x8"
            in log) and "--img-size 28" in log
    out = tmp_path / "same"  # at the checkpoint's own size: nothing resampled, nothing to warn about
    assert train(data, out, "--model", MICRO_CLIP, "--pretrained", str(weights)) == 0
    assert "warning:" not in (out / "train.log").read_text()


def test_a_resample_at_the_models_registered_size_is_its_design_and_no_warning(tmp_path, caplog):
    """As DINOv2's 518 px checkpoints into its 224 px towers: a 56 px file into the 28 px stand-in at 28 px."""
    from dgmoe.models import create_model

    save_file(create_model(MICRO_CLIP, num_classes=7, img_size=56).state_dict(), str(tmp_path / "w56.safetensors"))
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        model = create_model(MICRO_CLIP, num_classes=7, pretrained=str(tmp_path / "w56.safetensors"))
        create_model(MICRO_CLIP, num_classes=7, img_size=28, pretrained=str(tmp_path / "w56.safetensors"))
    assert model.info.load_report.regridded == (8, 4, 7) and "(grid 8x8 -> 4x4)" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_load_report_is_information_and_a_text_head_is_the_text_towers(tmp_path, caplog):
    from dgmoe.models import create_model

    tower = {k: v for k, v in create_model(MICRO_CLIP).state_dict().items() if not k.startswith("head.")}
    save_file(tower, str(tmp_path / "tower.safetensors"))  # an image tower's file: no classifier
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        create_model(MICRO_CLIP, num_classes=7, pretrained=str(tmp_path / "tower.safetensors"), text_head=True)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    said = caplog.text
    assert "head: written next from the text tower" in said and "initialised, not in the checkpoint" not in said


def test_a_class_missing_from_a_domain_is_a_dgmoe_warning_in_train_log_not_a_python_warning(tmp_path):
    data = pacs_tree(tmp_path / "data")
    for image in (data / "PACS" / "photo" / "horse").iterdir():
        image.unlink()
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a raw UserWarning would fail the run here
        assert train(data, out, "--model", MICRO_CLIP) == 0
    assert "warning: PACS: domain 'photo' has no images of class(es) horse" in (out / "train.log").read_text()


OPEN_CLIP_B16 = "open_clip.create_model_and_transforms('ViT-B-16', pretrained='openai')"


@pytest.mark.parametrize("argv, says", [
    (["--model", "hf-hub:timm/vit_base_patch16_clip_quickgelu_224.openai"], OPEN_CLIP_B16),
    (["--model", "vit_base_patch16_clip_quickgelu_224.openai"], OPEN_CLIP_B16),
    (["--model", "vit_base_patch16_clip_quickgelu_224", "--pretrained", "clip_b16"], OPEN_CLIP_B16),
    (["--model", "vit_base_patch16_clip_quickgelu_224", "--pretrained", "/nonexistent/clip.pth"],
     "openai/clip-vit-base-patch16"),
    (["--model", "vit_large_patch14_clip_224", "--pretrained", "/nonexistent/clip.pth"], "laion2b_s32b_b82k"),
    (["--model", "gmoe_base_patch16_clip_224", "--pretrained", "/nonexistent/clip.pth"], "laion2b_s34b_b88k"),
    (["--model", "vit_small_patch14_dinov2.lvd142m"], "torch.hub.load('facebookresearch/dinov2', 'dinov2_vits14')"),
    (["--model", "vit_micro_patch7_clip_28", "--pretrained", "micro"], "none exist for this test-sized stand-in"),
    (["--model", "deit_small_patch16_224.fb_in1k"], "`dgmoe weights get NAME --to DIR` (e.g. deit_small_patch16_224"),
])
def test_a_refused_weights_source_gives_the_recipe_of_the_model_asked_for(argv, says, cli, tmp_path):
    result = cli("train", "--dataset", "Debug28", "--progress", "none", "--output-dir", str(tmp_path / "run"), *argv)
    errors = [line for line in result.output.splitlines() if line.startswith("dgmoe: error:")]
    assert result.exit_code == 2 and len(errors) == 1 and says in errors[0], result.output
    if "clip" in argv[1] and "micro" not in argv[1]:  # never timm's DeiT recipe for a CLIP tower
        assert "deit_small" not in errors[0] and "text tower" in errors[0]


def test_a_timm_clip_file_without_a_text_tower_is_refused_with_the_full_clip_recipe(tmp_path):
    from dgmoe.errors import UsageError
    from dgmoe.models import create_model

    image_only = tmp_path / "vit_micro_clip.safetensors"
    save_file(create_model(MICRO_CLIP, num_classes=0).state_dict(), str(image_only))
    cfg = RunConfig.from_flat(dataset="Debug28", model=MICRO_CLIP, head="zeroshot", pretrained=str(image_only),
                              steps=0, output_dir=str(tmp_path / "run"), progress="none")
    with pytest.raises(UsageError, match="has no CLIP text tower") as refused:
        prepare_run(cfg)
    assert "none exist for this test-sized stand-in" in str(refused.value)  # this tower's own words
    cfg = cfg.replace(model="vit_base_patch16_clip_quickgelu_224", pretrained=None, patch_size=7,
                      model_kwargs={"depth": 1, "embed_dim": 64, "num_heads": 1})
    with pytest.raises(UsageError, match="needs CLIP's text tower") as refused:
        prepare_run(cfg)
    assert OPEN_CLIP_B16 in str(refused.value) and "openai/clip-vit-base-patch16" in str(refused.value)


def test_a_zero_shot_run_from_a_full_clip_file_says_its_load_as_information(tmp_path, caplog):
    """The recorded open_clip CLIP (image and text towers) on a GMoE tower: experts copied, the head the text
    tower's; nothing there for the user to act on, so no warning, and the head is not 'initialised'."""
    from clip_fixtures import clip_fixture_file

    path = clip_fixture_file("zero_shot", tmp_path)
    state = torch.load(path, weights_only=True)
    small = state["token_embedding.weight"]  # the recording's 320 ids: CLIP's tokenizer needs all 49,408
    state["token_embedding.weight"] = torch.cat([small, torch.randn(49408 - len(small), small.shape[1])])
    torch.save(state, path)
    kwargs = {"embed_dim": 32, "depth": 2, "num_heads": 2, "proj_dim": 48, "moe_layers": [1]}
    cfg = RunConfig.from_flat(dataset="Debug28", model="gmoe_base_patch16_clip_quickgelu_224", patch_size=7,
                              model_kwargs=kwargs, pretrained=str(path), head="zeroshot", prompt_templates="domainbed",
                              steps=0, output_dir=str(tmp_path / "run"), progress="none")
    with caplog.at_level(logging.INFO, logger="dgmoe"):
        setup = prepare_run(cfg)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    said = setup.run_config({})["model_build"]["pretrained_load"]
    assert "copied dense FFN into experts" in said and "head: written next from the text tower" in said
    assert "initialised, not in the checkpoint: head" not in said
