"""D3G: domain-specific heads reweighted by domain relations (Yao et al., "Improving Domain Generalization
with Domain Relations", ICLR 2024, arXiv 2302.02609).

Instead of one domain-invariant predictor, D3G trains one prediction head f_k per training domain on a
shared featuriser (the paper's multi-headed architecture) and predicts for a test domain t with the
relation-weighted average of the heads, f_t(x) = sum_k a_tk f_k(x) / sum_k a_tk. The domain relation
combines a fixed relation from metadata with a learned refinement of it,

    a_ij = beta a^g_ij + (1 - beta) a^l_ij,

and training minimises the supervised loss of each example's own-domain head plus the relation-aware
consistency loss: the relation-weighted average of the *other* heads must predict the label too,

    L = CE(f_d(x), y) + lambda CE(sum_{k != d} a_dk f_k(x) / sum_{k != d} a_dk, y).

Equation numbers are not cited (they were not verified here); the constructs are named as in the paper
and in the reference notes. The details follow the public FMoW reimplementation (Crasto & Rolf,
`crastoru/wilds-geoshift`; reference notes `moge-and-geo.md` §3): heads mix logits; a^g is the indicator of the
same domain; a^l is a cosine similarity cos(w ⊙ q_i, w ⊙ e_k) with a learned vector w; beta = 0.8 and
lambda = 0.5; in training the own head's weight is zeroed in the consistency mix, at test all heads are mixed.

**Which domains get heads** (`d3g_domain_field`):
- `""` (default): one head per training environment (DomainBed datasets: environments are the domains).
  A sample's own head is the index of its minibatch. Needs at least 2 training environments.
- a metadata field, e.g. `"region"`: one head per value of `meta[field]`, `d3g_num_groups` heads (WILDS
  FMoW, whose environments are time splits and whose regions are metadata; the reimplementation's choice).
  The default is the dataset's declared region field (`DatasetHParams.region_field`: FMoW's "region") and
  the number of groups its declared region count (`regions`: FMoW 6, GeoMNIST 6); elsewhere set
  `d3g_num_groups`. A head
  whose group never occurs in training is untrained: it is left out of every mix (buffer `head_seen`).

**Relations.** Here (no location encoder) the query of a domain is a learned embedding of its index,
q_d = e_d, so a^l_dk = cos(w ⊙ e_d, w ⊙ e_k) exists for training domains only. At test `predict` does not
know the environment; its relation comes from metadata:
- heads per metadata group and `meta[field]` names a group seen in training: a_tk = beta [t = k] +
  (1 - beta) a^l_tk (FMoW: the test region's head, refined);
- otherwise (heads per environment: the test environment is unseen; or a group never seen in training,
  or -1): no relation is known and the heads are averaged uniformly. D3G with heads per environment
  therefore predicts with the plain average of its heads, for held-out validation data of the training
  domains too. With heads per group, a batch without `meta[field]` raises `MetadataError`.
`D3G_WRAP` (`dgmoe.algorithms.d3g_wrap`) replaces the query by a location encoding, which exists for every
sample, seen domain or not.

**Learned-relation range** (`d3g_learned_relation`): a cosine can be negative, and a weighted average with
weights of both signs can divide by a sum near zero. `"shifted"` (default) uses (1 + cos) / 2 in [0, 1];
`"cosine"` uses the raw cosine as the reimplementation. Either way a row whose weights sum to less than
1e-6 in magnitude has no consistency loss (training) or falls back to the uniform average (test).

The backbone's own classifier is not used (the heads replace it; the run's model file holds the backbone,
the heads are in the algorithm's state). All per-sample losses are means over the global batch under
multi-process training, and the groups marked as seen are the global batch's.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.data.geo.metadata import MetadataError, location_ids, require_fields
from dgmoe.hparams import DatasetHParams, HParam, fixed, log_uniform, non_negative, one_of, positive, uniform
from dgmoe.sharding import Shard, all_reduce_sum, global_mean

EPS = 1e-6


def shifted_or_raw(cos: torch.Tensor, kind: str) -> torch.Tensor:
    """The learned relation a^l from a cosine similarity: (1 + cos) / 2 ('shifted') or cos ('cosine')."""
    return (1 + cos) / 2 if kind == "shifted" else cos


def relation_mix(head_logits: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_k w_k f_k / sum_k w_k per row ([N, H, C], [N, H] -> [N, C]) and the rows whose weight sum is
    usable (|sum| > EPS); the other rows hold the unnormalised sum and must not be used."""
    total = weights.sum(1)
    valid = total.abs() > EPS
    safe = torch.where(valid, total, torch.ones_like(total))
    dtype = head_logits.dtype
    mix = torch.einsum("nh,nhc->nc", weights.to(dtype), head_logits) / safe.unsqueeze(1).to(dtype)
    return mix, valid


@register_algorithm
class D3G(Algorithm):
    DESCRIPTION = "Domain-specific heads on a shared featuriser, mixed by domain relations from metadata (D3G)"
    REFERENCE = "Yao et al., Improving Domain Generalization with Domain Relations, ICLR 2024"
    HPARAMS = {
        "d3g_beta": HParam(0.8, uniform(0.5, 1.0), lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
        "d3g_consistency_weight": HParam(0.5, log_uniform(-1, 0.5), non_negative),
        "d3g_domain_field": HParam("", fixed("")),
        "d3g_num_groups": HParam(0, fixed(0), non_negative),
        "d3g_relation_dim": HParam(256, fixed(256), positive),
        "d3g_learned_relation": HParam("shifted", fixed("shifted"), one_of("shifted", "cosine")),
    }

    # buffers, registered in __init__
    head_seen: torch.Tensor

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        """Heads per region where the dataset declares regions (`DatasetHParams.region_field`, `regions`)."""
        specs = dict(cls.HPARAMS)
        field, groups = dataset.region_field, dataset.regions
        specs["d3g_domain_field"] = HParam(field, fixed(field))
        specs["d3g_num_groups"] = HParam(groups, fixed(groups), non_negative)
        return specs

    def __init__(self, network: nn.Module, num_classes: int, num_domains: int, hparams: dict[str, Any]):
        super().__init__(network, num_classes, num_domains, hparams)
        hp = self.hparams
        if hp["d3g_learned_relation"] not in ("shifted", "cosine"):
            raise ValueError(f"d3g_learned_relation must be 'shifted' or 'cosine', got {hp['d3g_learned_relation']!r}")
        self.field = hp["d3g_domain_field"]
        if self.field:
            if hp["d3g_num_groups"] < 2:
                raise ValueError(f"{type(self).__name__} with d3g_domain_field={self.field!r} needs d3g_num_groups "
                                 f">= 2 (the number of values of meta[{self.field!r}]), got {hp['d3g_num_groups']}")
            self.num_heads = int(hp["d3g_num_groups"])
        else:
            if num_domains < 2:
                raise ValueError(f"{type(self).__name__} with one head per training environment needs at least 2 "
                                 f"training domains, got {num_domains}; give heads per metadata group instead "
                                 "(e.g. --hparams '{\"d3g_domain_field\": \"region\", \"d3g_num_groups\": N}')")
            self.num_heads = num_domains
        dim, heads = cast(int, network.num_features), self.num_heads  # timm's API
        bound = 1 / math.sqrt(dim)  # nn.Linear's default initialisation, one linear head per domain
        self.head_weight = nn.Parameter(torch.empty(heads, num_classes, dim).uniform_(-bound, bound))
        self.head_bias = nn.Parameter(torch.empty(heads, num_classes).uniform_(-bound, bound))
        rdim = hp["d3g_relation_dim"]
        self.domain_embedding = nn.Parameter(torch.randn(heads, rdim))  # e_k
        self.relation_scale = nn.Parameter(torch.rand(rdim))  # w
        self.register_buffer("head_seen", torch.full((heads,), not self.field, dtype=torch.bool))
        self.build_relation()
        own = {id(p) for p in self.classifier().parameters()}
        params = [p for p in network.parameters() if id(p) not in own]
        params += [p for name, p in self.named_parameters() if not name.startswith("network.")]
        self.optimizer = self.make_optimizer(params)

    def build_relation(self) -> None:
        """Extra modules of the learned relation (D3G_WRAP: the location encoder and its MLP)."""

    # ----- heads and relations ------------------------------------------------------------------
    def head_logits(self, z: torch.Tensor) -> torch.Tensor:
        """[N, H, C]: every head's logits for every sample."""
        w, b = self.head_weight.to(z.dtype), self.head_bias.to(z.dtype)
        return torch.einsum("nd,hcd->nhc", z, w) + b

    def groups(self, meta: Mapping[str, torch.Tensor] | None, training: bool) -> torch.Tensor:
        """Validated meta[field] ([N] long; -1 = unknown, refused in training)."""
        require_fields(meta, (self.field,), f"{type(self).__name__} (heads per {self.field!r})")
        ids = location_ids(meta, self.num_heads, owner=f"{type(self).__name__} (d3g_num_groups={self.num_heads})",
                           key=self.field)
        if training and bool((ids < 0).any()):
            raise MetadataError(f"{type(self).__name__}: every training sample needs its group meta[{self.field!r}] "
                                f"(got -1 in {int((ids < 0).sum())} rows)")
        return ids

    def own_domains(self, minibatches: list[Batch], batch: Batch) -> torch.Tensor:
        """Each training sample's own head: its minibatch (heads per environment) or its group."""
        if self.field:
            return self.groups(batch.meta, training=True).to(batch.y.device)
        return torch.cat([torch.full((len(b.y),), i, dtype=torch.long, device=b.y.device)
                          for i, b in enumerate(minibatches)])

    def test_domains(self, meta: Mapping[str, torch.Tensor] | None, n: int, device: torch.device) -> torch.Tensor:
        """The domain of each sample to predict, as far as metadata says: its group (heads per group) or
        -1 = unknown (an unseen environment, or a group never seen in training)."""
        if not self.field:
            return torch.full((n,), -1, dtype=torch.long, device=device)
        ids = self.groups(meta, training=False).to(device)
        seen = self.head_seen.to(device)[ids.clamp(min=0)]
        return torch.where((ids >= 0) & seen, ids, torch.full_like(ids, -1))

    def mark_seen(self, own: torch.Tensor, shard: Shard | None) -> None:
        if self.field:
            counts = all_reduce_sum(torch.bincount(own, minlength=self.num_heads), shard)
            self.head_seen |= (counts > 0).to(self.head_seen.device)

    def fixed_relation(self, domains: torch.Tensor) -> torch.Tensor:
        """a^g: [N, H], the indicator of the same domain (zero rows for unknown domains)."""
        known = domains >= 0
        return F.one_hot(domains.clamp(min=0), self.num_heads).float() * known.unsqueeze(1)

    def scaled_cosine(self, queries: torch.Tensor) -> torch.Tensor:
        """a^l = map(cos(w ⊙ q_n, w ⊙ e_k)): [N, rdim] queries -> [N, H]."""
        w = self.relation_scale
        cos = F.cosine_similarity((w * queries.to(w.dtype)).unsqueeze(1), (w * self.domain_embedding).unsqueeze(0),
                                  dim=-1, eps=1e-8)
        return shifted_or_raw(cos, self.hparams["d3g_learned_relation"])

    def learned_relation(self, domains: torch.Tensor,
                         meta: Mapping[str, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """a^l [N, H] and the rows where it is defined: here the embedding e_d of a known domain d."""
        known = domains >= 0
        return self.scaled_cosine(self.domain_embedding[domains.clamp(min=0)]), known

    def relation(self, domains: torch.Tensor, meta: Mapping[str, torch.Tensor] | None) -> torch.Tensor:
        """a = beta a^g + (1 - beta) a^l over the heads seen in training ([N, H]; unseen heads get 0)."""
        beta = self.hparams["d3g_beta"]
        learned, defined = self.learned_relation(domains, meta)
        a = beta * self.fixed_relation(domains).to(learned.device) + (1 - beta) * learned * defined.unsqueeze(1)
        return a * self.head_seen.to(a.device)

    # ----- training and prediction --------------------------------------------------------------
    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        z = torch.cat(self.domain_features(minibatches))
        own = self.own_domains(minibatches, batch)
        self.mark_seen(own, batch.shard)
        logits = at_least_fp32(self.head_logits(z))
        rows = torch.arange(len(own), device=own.device)
        task = global_mean(F.cross_entropy(logits[rows, own], batch.y, reduction="none"), batch.shard)
        weights = self.relation(own, batch.meta).clone()
        weights[rows, own] = 0.0  # the consistency mix leaves the own head out
        mix, valid = relation_mix(logits, weights)
        ce = F.cross_entropy(mix, batch.y, reduction="none") * valid
        count = all_reduce_sum(valid.sum().to(ce.dtype), batch.shard)
        consistency = all_reduce_sum(ce.sum(), batch.shard) / count.clamp(min=1)
        aux = self.moe_aux_loss()
        loss = task + self.hparams["d3g_consistency_weight"] * consistency + aux
        self.step(loss)
        return {"loss": loss.item(), "loss_task": task.item(), "loss_consistency": consistency.item(),
                "loss_aux": aux.item()}

    def predict_weights(self, meta: Mapping[str, torch.Tensor] | None, n: int, device: torch.device) -> torch.Tensor:
        """The test-time relation [n, H]: rows without a usable relation become uniform over the seen heads
        (over all heads before any training)."""
        a = self.relation(self.test_domains(meta, n, device), meta).to(device)
        seen = self.head_seen.to(device)
        uniform_rows = (seen if bool(seen.any()) else torch.ones_like(seen)).float().expand(n, -1)
        return torch.where((a.sum(1).abs() > EPS).unsqueeze(1), a, uniform_rows)

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        z = self.features(x, meta)
        mix, _ = relation_mix(self.head_logits(z), self.predict_weights(meta, len(z), z.device))
        return mix

    def predict_online(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.predict(x, meta)
