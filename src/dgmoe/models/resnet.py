"""ResNet-50/101 baselines (He et al., CVPR 2016; torchvision's v1.5 with the stride on the 3x3 conv).

Parameter names are torchvision's (`conv1`, `bn1`, `layer1`..`layer4` of Bottlenecks with `conv1..3`,
`bn1..3`, `downsample.0/.1`, `fc`), which timm's `resnet50`/`resnet101` share, so state dicts of either
load strictly without torchvision or timm installed. The module follows timm's API:
`forward_features` (the [B, 2048, H/32, W/32] map), `forward_head(x, pre_logits)` (global average pool,
dropout, `fc`), `get_classifier`, `reset_classifier` and `num_features`.

DomainBed's ResNet featurizer options are kwargs here: `drop_rate` is `resnet_dropout` (dropout on the
pooled feature, default 0) and `freeze_bn=True` keeps every BatchNorm in eval mode during training (old
DomainBed's default; current DomainBed and dgmoe default to False, i.e. BatchNorm trains normally).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from dgmoe.errors import UsageError
from dgmoe.models.info import RESNET_HPARAMS, ModelInfo, set_info
from dgmoe.models.layers import Dropout
from dgmoe.models.registry import register_model


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    uses_metadata = False
    info: ModelInfo  # set by the builder (its `load_report`: the re-initialised keys, when a checkpoint was loaded)

    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000, in_chans: int = 3,
                 drop_rate: float = 0.0, freeze_bn: bool = False):
        super().__init__()
        self.num_classes = num_classes
        self.freeze_bn = freeze_bn
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_chans, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.num_features = 512 * Bottleneck.expansion
        self.head_drop = Dropout(drop_rate)
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        out = planes * Bottleneck.expansion
        if stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, out, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(out))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = out
        layers += [Bottleneck(out, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def train(self, mode: bool = True) -> "ResNet":
        super().train(mode)
        if mode and self.freeze_bn:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self

    # ----- timm API ----------------------------------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.head_drop(x.mean(dim=(2, 3)))
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class ResNetCheckpointError(UsageError):
    """A ResNet checkpoint whose keys or shapes do not match the model."""


def load_resnet_checkpoint(model: ResNet, path: str | Path) -> list[str]:
    """Load a torchvision/timm ResNet state dict strictly; returns the re-initialised keys.

    Every key must match in name and shape, except `fc.weight`/`fc.bias` when the checkpoint has another
    class count (the head is then kept freshly initialised, as for fine-tuning). Files are read safely
    (`.safetensors`, or `torch.load(weights_only=True)`).
    """
    from dgmoe.models.pretrained import load_checkpoint_file

    state = load_checkpoint_file(path)
    own = model.state_dict()
    reinitialized: list[str] = []
    for key in ("fc.weight", "fc.bias"):
        if key in state and key in own and state[key].shape != own[key].shape:
            state.pop(key)
            reinitialized.append(key)
    if not isinstance(model.fc, nn.Linear):  # num_classes=0: a checkpoint's head has no place
        reinitialized += [k for k in ("fc.weight", "fc.bias") if state.pop(k, None) is not None]
    unexpected = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state) - set(reinitialized))
    if unexpected or missing:
        raise ResNetCheckpointError(
            f"{path}: not a matching ResNet state dict: {len(missing)} missing keys (first: "
            f"{missing[:3]}), {len(unexpected)} unexpected keys (first: {unexpected[:3]})")
    for key, tensor in state.items():
        if tensor.shape != own[key].shape:
            raise ResNetCheckpointError(f"{path}: shape mismatch at {key!r}: checkpoint {tuple(tensor.shape)} "
                                        f"vs model {tuple(own[key].shape)}")
    model.load_state_dict({**{k: own[k] for k in reinitialized if k in own}, **state}, strict=True)
    return reinitialized


def _build(name: str, layers: tuple[int, int, int, int], num_classes: int = 1000, img_size: int | None = None,
           pretrained: str | None = None, **kwargs: Any) -> ResNet:
    # fully convolutional: any input size works; `img_size` only records the size the model is built for
    size = img_size or 224
    model = ResNet(layers, num_classes=num_classes, **kwargs)
    model.info = ModelInfo(architecture=name, family="resnet", input_size=(kwargs.get("in_chans", 3), size, size),
                           num_features=model.num_features, classifier="fc", hparam_kwargs=dict(RESNET_HPARAMS))
    if pretrained:
        set_info(model, load_report=load_resnet_checkpoint(model, pretrained))
    return model


@register_model
def resnet50(num_classes: int = 1000, img_size: int | None = None, pretrained: str | None = None,
             **kwargs: Any) -> ResNet:
    """ResNet-50 (25.6M parameters with 1000 classes)."""
    return _build("resnet50", (3, 4, 6, 3), num_classes, img_size, pretrained, **kwargs)


@register_model
def resnet101(num_classes: int = 1000, img_size: int | None = None, pretrained: str | None = None,
              **kwargs: Any) -> ResNet:
    """ResNet-101 (44.5M parameters with 1000 classes)."""
    return _build("resnet101", (3, 4, 23, 3), num_classes, img_size, pretrained, **kwargs)
