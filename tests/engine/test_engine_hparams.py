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
