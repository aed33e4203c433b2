"""Hyperparameters follow what a model is (its ModelInfo), never its name."""
import pytest

from dgmoe.engine.hparams import default_hparams, random_hparams
from dgmoe.models.info import describe_model


@pytest.mark.parametrize("dataset", ["PACS", "OfficeHome", "RotatedMNIST"])
@pytest.mark.parametrize("algorithm", ["ERM", "CORAL", "Fish"])
def test_a_vit_with_moe_layers_gets_the_hparams_of_the_gmoe_of_its_shape(dataset, algorithm):
    gmoe = describe_model("gmoe_small_patch16_224")
    vit_with_moe = describe_model("vit_small_patch16_224", moe_layers="last-two")
    assert vit_with_moe.sparse == gmoe.sparse and vit_with_moe.sparse_blocks == gmoe.sparse_blocks
    assert default_hparams(algorithm, dataset, vit_with_moe) == default_hparams(algorithm, dataset, gmoe)
    for seed in (1, 5):
        assert random_hparams(algorithm, dataset, seed, vit_with_moe) == random_hparams(algorithm, dataset, seed, gmoe)
    dense = default_hparams(algorithm, dataset, describe_model("vit_small_patch16_224"))
    assert "moe_aux_weight" not in dense and "moe_aux_weight" in default_hparams(algorithm, dataset, gmoe)


def test_moa_gets_moas_hparams_on_a_clip_tower():
    """MoA's registry (DomainBed's: lr 5e-5, batch 32, weight decay 0), its 0.01 loss weight, and no drop path
    (timm's ViT default, which MoA builds); GMoE's 0.1 stays dgmoe's ViT default otherwise."""
    moa = default_hparams("ERM", "PACS", describe_model("vit_base_patch16_clip_224", peft={"mode": "moa"}))
    assert {k: moa[k] for k in ("lr", "batch_size", "weight_decay", "moe_aux_weight", "drop_path_rate")} == {
        "lr": 5e-5, "batch_size": 32, "weight_decay": 0.0, "moe_aux_weight": 0.01, "drop_path_rate": 0.0}
    lora = default_hparams("ERM", "PACS", describe_model("vit_base_patch16_clip_224", peft={"mode": "lora"}))
    assert lora["drop_path_rate"] == 0.1
