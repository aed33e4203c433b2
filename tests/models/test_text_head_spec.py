"""CLIP's zero-shot head is built with the model from plain data (`TextHeadSpec`): `create_model(..., text_head=spec)`
writes it and records how, leaves the global random state alone and sets nothing on the model but its `info`; a
rebuilt run gets the head's shape only; the head's name is compared in one place; an algorithm gets what the run
knows through one typed hook."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import dgmoe
from dgmoe.algorithms import get_algorithm
from dgmoe.algorithms.base import RunContext
from dgmoe.engine.build import RecordedData, model_build, run_build
from dgmoe.engine.config import RunConfig
from dgmoe.engine.hparams import default_hparams
from dgmoe.errors import UsageError
from dgmoe.models.clip.head_spec import SEEDED, TextHeadSpec
from dgmoe.models.clip.templates import DOMAINBED
from dgmoe.models.clip.text_tower import MICRO_OPENAI_TEXT, TextTransformer
from dgmoe.models.clip.zero_shot import TextHead, init_text_head
from dgmoe.models.factory import build_model
from dgmoe.seeding import seed_hash

MICRO = "vit_micro_patch7_clip_quickgelu_28"
NAMES = ("dog", "elephant", "giraffe")
SPEC = TextHeadSpec(seed=3, class_names=NAMES, templates="domainbed")


def test_the_build_writes_the_head_from_the_spec_and_records_how():
    torch.manual_seed(0)
    built = build_model(MICRO, num_classes=3, text_head=SPEC)
    after = torch.random.get_rng_state()
    torch.manual_seed(0)
    shape = dgmoe.create_model(MICRO, num_classes=3, text_head=True)  # the head's shape only
    assert torch.equal(after, torch.random.get_rng_state())  # writing the head drew nothing from the run's RNG
    for key, value in shape.state_dict().items():  # the same image tower: only the head differs
        if not key.startswith("head."):
            torch.testing.assert_close(built.model.state_dict()[key], value)
    torch.manual_seed(seed_hash(3, "text tower"))  # the stand-in's text tower, drawn from the spec's seed
    init_text_head(shape, TextTransformer(MICRO_OPENAI_TEXT).eval(), NAMES, DOMAINBED)
    torch.testing.assert_close(built.model.get_classifier().weight, shape.get_classifier().weight)
    assert built.model.info.text_load == f"{SEEDED}; 3 class names x 1 templates"
    assert shape.info.text_load is None and isinstance(shape.get_classifier(), TextHead)
    assert isinstance(built.text_tower, TextTransformer)  # kept for the run (FLYP), not on the model
    linear = dgmoe.create_model(MICRO, num_classes=3)
    assert set(vars(built.model)) == set(vars(linear))  # no attribute but `info` says what the build did


def test_a_spec_without_a_tower_builds_the_shape_and_a_named_file_must_hold_a_text_tower(tmp_path):
    built = build_model(MICRO, num_classes=3, text_head=SPEC.shape_only())
    assert built.text_tower is None and built.model.info.text_load is None
    assert isinstance(built.model.get_classifier(), TextHead)
    image_only = tmp_path / "image.pt"
    torch.save(dgmoe.create_model(MICRO, num_classes=3).state_dict(), image_only)
    with pytest.raises(UsageError, match="has no CLIP text tower"):
        build_model(MICRO, num_classes=3, text_head=TextHeadSpec(str(image_only), None, NAMES, "domainbed"))
    with pytest.raises(UsageError, match="needs CLIP's text tower from a file"):  # no seeded tower for real ones
        build_model("vit_base_patch16_clip_224", num_classes=3, embed_dim=32, depth=1, num_heads=2,
                    text_head=SPEC)


def test_the_model_build_makes_the_spec_and_a_rebuilt_run_drops_its_tower():
    cfg = RunConfig.from_flat(dataset="PACS", model=MICRO, head="zeroshot", prompt_templates="domainbed", seed=5)
    data = RecordedData(7, (3, 28, 28), "PACS", ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"))
    build = model_build(cfg, data)
    assert build.text_head == TextHeadSpec(None, 5, data.classes, "domainbed", (), "cpu")
    assert build.record()["kwargs"]["text_head"] is True  # config.json's model build reads as before
    assert model_build(cfg.replace(head="linear"), data).text_head is None
    recorded = {"config": cfg.to_dict(), "dataset": {"name": "PACS", "classes": list(data.classes),
                                                     "input_shape": [3, 28, 28]}}
    rebuilt = run_build(recorded).text_head
    assert rebuilt is not None and not rebuilt.writes and rebuilt.class_names == data.classes


def test_zeroshot_is_compared_in_one_place():
    src = Path(dgmoe.__file__).parent
    compared = [str(path.relative_to(src)) for path in sorted(src.rglob("*.py"))
                for line in path.read_text().splitlines()
                if re.search(r"""[=!]=\s*["']zeroshot["']|["']zeroshot["']\s*[=!]=|\bhead\s*[=!]=""", line)]
    assert compared == ["names.py"], compared  # `is_text_head`; everything else asks the build


def test_algorithms_get_the_run_through_one_typed_hook():
    network = dgmoe.create_model(MICRO, num_classes=3, text_head=SPEC.shape_only())
    flyp = get_algorithm("FLYP")(network, 3, 2, default_hparams("FLYP", "Debug28"))
    with pytest.raises(UsageError, match="FLYP trains the text tower that wrote its head"):
        flyp.attach_run(RunContext(5, SPEC.shape_only(), None))
    clipood = get_algorithm("CLIPood")(network, 3, 2, default_hparams("CLIPood", "Debug28"))
    clipood.attach_run(RunContext(5))
    assert clipood.total_steps == 5
    assert [a for a in ("ERM", "FLYP", "CLIPood", "SWAD") if get_algorithm(a).LENGTH_BOUND] == ["CLIPood"]
