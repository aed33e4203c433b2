"""D3G+WRAP: D3G whose learned domain relation reads a location encoder of the sample's coordinates
(Crasto & Rolf, "Robustness to geographic distribution shift using location encoders", arXiv 2503.02036;
MoGE Table 1's "D3G+LE"), on D3G (Yao et al., ICLR 2024; see `dgmoe.algorithms.d3g`).

The learned relation between a sample x and head k is

    a^l_xk = map(cos(w ⊙ MLP(WRAP(lon, lat)), w ⊙ e_k)),   WRAP = [cos lon, cos lat, sin lon, sin lat]

(Mac Aodha et al. 2019, `dgmoe.models.location.wrap`), with MLP = Linear(4, r/2), ReLU, Linear(r/2, r)
(r = `d3g_relation_dim`), e_k a learned vector per head and w a learned vector, as in the public FMoW
reimplementation (`crastoru/wilds-geoshift`), which feeds the scalar head index through an MLP instead of
e_k (an MLP of a one-hot index can express any such vector). `map` is D3G's `d3g_learned_relation`.
Combined with the fixed relation as in D3G: a_xk = beta [d(x) = k] + (1 - beta) a^l_xk.

- **Training**: the own head's loss plus the consistency loss on the relation-weighted mix of the other
  heads. The indicator is zero on every other head, so the consistency mix is weighted by the learned,
  location-aware relation alone, and its gradient is what trains the MLP, w and the e_k.
- **Test**: the relation comes from the sample's coordinates, so it exists for unseen domains (an unseen
  environment, a held-out region). With heads per metadata group and a seen group in `meta[field]`, the
  indicator adds beta to that group's head (FMoW: region heads, the reimplementation's setting).

Every batch, at training and at prediction, must carry `lat` and `lon` (degrees): missing or out-of-range
coordinates raise `MetadataError`, never a silent fallback. `d3g_location_encoder` may name another
parameter-free or trainable encoder of the registry ('sh': spherical harmonics, 'sh_siren': SatCLIP's).
"""
from __future__ import annotations

from typing import Any, Mapping, cast

import torch
import torch.nn as nn

from dgmoe.algorithms.d3g import D3G
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.hparams import HParam, fixed, one_of
from dgmoe.models.location.encoders import build_location_encoder

LOCATION_ENCODERS = ("wrap", "sh", "sh_siren")


@register_algorithm
class D3G_WRAP(D3G):
    DESCRIPTION = "D3G whose learned domain relations read a WRAP location encoding of lat/lon (D3G+LE)"
    REFERENCE = ("Crasto & Rolf, Robustness to geographic distribution shift using location encoders, "
                 "arXiv 2503.02036; Yao et al., ICLR 2024")
    HPARAMS = {**D3G.HPARAMS,
               "d3g_location_encoder": HParam("wrap", fixed("wrap"), one_of(*LOCATION_ENCODERS))}

    def __init__(self, network: nn.Module, num_classes: int, num_domains: int, hparams: dict[str, Any]):
        name = hparams.get("d3g_location_encoder")
        if name not in LOCATION_ENCODERS:
            raise ValueError(f"d3g_location_encoder must be one of {LOCATION_ENCODERS}, got {name!r}")
        super().__init__(network, num_classes, num_domains, hparams)

    def build_relation(self) -> None:
        rdim = self.hparams["d3g_relation_dim"]
        self.location_encoder = build_location_encoder(self.hparams["d3g_location_encoder"])
        out_dim = cast(int, self.location_encoder.out_dim)  # every location encoder has one
        self.location_mlp = nn.Sequential(nn.Linear(out_dim, max(rdim // 2, 1)), nn.ReLU(),
                                          nn.Linear(max(rdim // 2, 1), rdim))

    def location_queries(self, meta: Mapping[str, torch.Tensor] | None) -> torch.Tensor:
        """MLP(WRAP(lon, lat)): [N, r]."""
        weight = self.location_mlp[0].weight
        return self.location_mlp(self.location_encoder(meta).to(weight.device, weight.dtype))

    def learned_relation(self, domains: torch.Tensor,
                         meta: Mapping[str, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """a^l from the sample's location: defined for every row, seen domain or not."""
        learned = self.scaled_cosine(self.location_queries(meta))
        return learned, torch.ones(len(learned), dtype=torch.bool, device=learned.device)
