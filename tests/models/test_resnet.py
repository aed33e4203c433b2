"""ResNet-50/101 baselines: torchvision/timm parameter names, strict checkpoint loading, timm API."""
import pytest
import torch
import torch.nn as nn

from dgmoe.models.resnet import ResNet, ResNetCheckpointError, load_resnet_checkpoint, resnet50, resnet101


@pytest.fixture(scope="module")
def r50():
    torch.manual_seed(0)
    return resnet50()


@pytest.fixture(scope="module")
def r101():
    return resnet101()


def small_resnet(**kwargs):
    """One Bottleneck per stage: the same module and API as ResNet-50, cheaper for training tests."""
    torch.manual_seed(0)
    return ResNet((1, 1, 1, 1), **kwargs)


def test_parameter_counts_match_torchvision(r50, r101):
    # torchvision.models.resnet50() / resnet101(): 25,557,032 / 44,549,160 parameters
    assert sum(p.numel() for p in r50.parameters()) == 25_557_032
    assert sum(p.numel() for p in r101.parameters()) == 44_549_160


def test_state_dict_uses_torchvision_and_timm_names(r50):
    keys = r50.state_dict()
    assert len(keys) == 320  # torchvision resnet50: 161 parameters + 159 BatchNorm buffers
    for key, shape in {
        "conv1.weight": (64, 3, 7, 7), "bn1.running_var": (64,), "bn1.num_batches_tracked": (),
        "layer1.0.downsample.0.weight": (256, 64, 1, 1), "layer1.0.downsample.1.running_mean": (256,),
        "layer2.0.conv2.weight": (128, 128, 3, 3), "layer3.5.bn3.bias": (1024,),
        "layer4.2.conv3.weight": (2048, 512, 1, 1), "fc.weight": (1000, 2048), "fc.bias": (1000,),
    }.items():
        assert tuple(keys[key].shape) == shape, key
    assert "layer1.1.downsample.0.weight" not in keys
    assert r50.info.classifier == "fc" and r50.info.family == "resnet"


def test_timm_api():
    torch.manual_seed(0)
    m = resnet50(num_classes=7).eval()
    x = torch.randn(2, 3, 64, 64)
    fmap = m.forward_features(x)
    assert fmap.shape == (2, 2048, 2, 2) and m.num_features == 2048
    pooled = m.forward_head(fmap, pre_logits=True)
    assert torch.allclose(pooled, fmap.mean((2, 3)))
    assert torch.allclose(m(x), m.get_classifier()(pooled)) and m.get_classifier() is m.fc
    m.reset_classifier(3)
    assert m(x).shape == (2, 3)


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_strict_round_trip_of_a_torchvision_style_checkpoint(tmp_path, r50, suffix):
    state = {k: v.clone() for k, v in r50.state_dict().items()}
    for k, v in state.items():  # distinctive values, including BN statistics
        if v.is_floating_point():
            v.add_(torch.randn_like(v) * 0.01)
    path = tmp_path / f"resnet50{suffix}"
    if suffix == ".pth":
        torch.save(state, path)
    else:
        from safetensors.torch import save_file

        save_file(state, str(path))
    loaded = resnet50(pretrained=str(path))
    assert loaded.info.load_report == []
    assert all(torch.equal(state[k], v) for k, v in loaded.state_dict().items())


def test_other_class_count_reinitialises_only_the_head(tmp_path, r50):
    path = tmp_path / "r50.pth"
    torch.save(r50.state_dict(), path)
    m = resnet50(num_classes=7, pretrained=str(path))
    assert m.info.load_report == ["fc.weight", "fc.bias"] and m.fc.weight.shape == (7, 2048)
    assert torch.equal(m.layer4[2].conv3.weight, r50.layer4[2].conv3.weight)


def test_mismatching_checkpoints_are_rejected_by_name(tmp_path, r50, r101):
    target = resnet50(num_classes=1000)  # loads fail before touching the model, so one target serves all
    untouched = target.layer3[0].conv2.weight.clone()
    state = dict(r50.state_dict())
    state.pop("layer2.1.bn2.running_mean")
    torch.save(state, tmp_path / "missing.pth")
    with pytest.raises(ResNetCheckpointError, match=r"1 missing keys.*layer2\.1\.bn2\.running_mean"):
        load_resnet_checkpoint(target, tmp_path / "missing.pth")
    torch.save({**r50.state_dict(), "head.weight": torch.zeros(1)}, tmp_path / "extra.pth")
    with pytest.raises(ResNetCheckpointError, match=r"1 unexpected keys.*head\.weight"):
        load_resnet_checkpoint(target, tmp_path / "extra.pth")
    torch.save(r50.state_dict(), tmp_path / "r50.pth")
    with pytest.raises(ResNetCheckpointError, match="missing"):  # a ResNet-50 file into a ResNet-101
        load_resnet_checkpoint(r101, tmp_path / "r50.pth")
    bad = dict(r50.state_dict())
    bad["conv1.weight"] = torch.zeros(64, 3, 3, 3)
    torch.save(bad, tmp_path / "shape.pth")
    with pytest.raises(ResNetCheckpointError, match="shape mismatch at 'conv1.weight'"):
        load_resnet_checkpoint(target, tmp_path / "shape.pth")
    assert torch.equal(target.layer3[0].conv2.weight, untouched)


def test_freeze_bn_keeps_running_statistics():
    torch.manual_seed(0)
    m = small_resnet(num_classes=2, freeze_bn=True).train()
    assert all(not b.training for b in m.modules() if isinstance(b, nn.BatchNorm2d))
    before = m.bn1.running_mean.clone()
    m(torch.randn(2, 3, 32, 32))
    assert torch.equal(before, m.bn1.running_mean)
    unfrozen = small_resnet(num_classes=2).train()
    unfrozen(torch.randn(2, 3, 32, 32))
    assert not torch.equal(unfrozen.bn1.running_mean, torch.zeros(64))


def test_drop_rate_is_dropout_on_the_pooled_feature():
    m = small_resnet(num_classes=2, drop_rate=0.5)
    assert m.head_drop.p == 0.5


@pytest.mark.parametrize("name", ["ERM", "CORAL", "SMA"])
def test_algorithms_train_a_resnet(name):
    from dgmoe.algorithms import get_algorithm
    from dgmoe.data.base import Batch
    from dgmoe.engine.hparams import default_hparams

    torch.manual_seed(0)
    alg = get_algorithm(name)(small_resnet(num_classes=2), 2, 2, default_hparams(name, "PACS", "resnet50"))
    batches = [Batch(torch.randn(2, 3, 32, 32), torch.tensor([0, 1])) for _ in range(2)]
    out = alg.update(batches, 0)
    assert torch.isfinite(torch.tensor(out["loss"]))
    alg.eval()
    with torch.no_grad():
        assert alg.predict(batches[0].x).shape == (2, 2)
