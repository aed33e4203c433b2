"""MoGE's ViT (Rangzan et al., GCPR 2026, eq. 1): a ViT whose image-routed sparse blocks route on the
metadata context r = phi(m) of its location encoder. `dgmoe.models.builder` builds it for `routing='image'`;
`dgmoe.models.moge` registers the MoGE models."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from dgmoe.models.info import ModelInfo
from dgmoe.models.location.encoders import build_location_encoder
from dgmoe.models.vit import VisionTransformer
from dgmoe.moe.auxiliary import sparse_layers
from dgmoe.moe.gate import RoutingMode, routing_context
from dgmoe.moe.layer import MoEMlp

#: MoGE's default location encoder phi (§2.3: SH(L=10) + SIREN).
MOGE_LOCATION = dict(location_encoder="sh_siren")


def location_encoder_for(settings: dict[str, Any]) -> nn.Module:
    """phi from MoGE's model settings (`location_encoder`: a registered name, default SH + SIREN)."""
    return build_location_encoder(settings.get("location_encoder", MOGE_LOCATION["location_encoder"]),
                                  **(settings.get("location_encoder_kwargs") or {}))


class MoGEVisionTransformer(VisionTransformer):
    """A ViT whose image-routed sparse blocks route on r = phi(meta); `forward_features(x, meta=...)`."""

    uses_metadata = True
    info: ModelInfo  # set by build_vit

    def __init__(self, location_encoder: nn.Module, **vit_kwargs: Any):
        super().__init__(**vit_kwargs)
        self.location_encoder = location_encoder

    def moge_layers(self) -> list[MoEMlp]:
        return list(sparse_layers(self).values())

    def set_routing_mode(self, mode: RoutingMode, expert: int | None = None) -> None:
        """'routed' (eq. 1), 'shared_only' (MoGE-SE, §2.2 (i): f = f_0, no metadata needed) or 'forced'
        (every image through specialist `expert` with alpha = 1, App. A / Fig. 3), in every MoGE block
        (`MoEMlp.set_routing_mode`; `dgmoe.moe.routing_mode` for a block of code)."""
        for layer in self.moge_layers():
            layer.set_routing_mode(mode, expert)

    @property
    def routing_mode(self) -> RoutingMode:
        return self.moge_layers()[0].routing_mode

    def context(self, meta: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """r = phi(m) for a batch (validated by the location encoder)."""
        return self.location_encoder(meta)

    def forward_features(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        r = self.context(meta) if self.routing_mode == "routed" else None
        with routing_context(r):
            return super().forward_features(x)

    def forward_intermediates(self, x: torch.Tensor, *args: Any, meta: dict[str, torch.Tensor] | None = None,
                              **kwargs: Any) -> Any:
        """timm's `forward_intermediates`, the MoGE blocks routed on r = phi(meta) as in `forward_features`."""
        r = self.context(meta) if self.routing_mode == "routed" else None
        with routing_context(r):
            return super().forward_intermediates(x, *args, **kwargs)

    def forward(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, meta=meta))
