"""Representation self-challenging, RSC (Huang et al., ECCV 2020, eqs. 1-5 and Sec. 3.3), as DomainBed.

With features z = f(x) and the true-class logit s_y = h(z)_y, RSC
1. takes the gradient g = d s_y / d z per sample (eq. 1);
2. mutes, per sample, the features whose gradient is in the top `1 - rsc_f_drop_factor` fraction, i.e. keeps
   z_k where g_k < the per-sample (1 - f) quantile of g (eqs. 2-3);
3. measures how much muting lowers the softmax probability of the true class and keeps the whole feature
   vector of the samples whose drop is below the batch's (1 - `rsc_b_drop_factor`) quantile (Sec. 3.3,
   "batch percentage": only the other samples are challenged);
4. trains on CE(h(z * mask), y) (eqs. 4-5).

Quantiles use linear interpolation (numpy's `percentile` default, DomainBed's). The masks are constants.

Backbones: this is the channel-wise RSC of DomainBed, on the pooled feature vector of `forward_head(pre_logits=
True)`, which every backbone has (the ResNet's pooled map, a ViT's class token or token mean); the paper's
spatial-wise variant (muting feature-map locations, i.e. patch tokens for a ViT) is not implemented. Under
multi-process training the batch quantile of step 3 is the global batch's (the drops are gathered).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy, split_sizes
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, uniform
from dgmoe.sharding import gather_samples


def feature_mask(grads: torch.Tensor, drop_fraction: float) -> torch.Tensor:
    """1 where a feature's gradient is below the sample's (1 - drop_fraction) quantile, else 0 (eqs. 2-3)."""
    threshold = torch.quantile(grads, 1.0 - drop_fraction, dim=1, keepdim=True)
    return (grads < threshold).to(grads.dtype)


def rsc_masks(z: torch.Tensor, logits: torch.Tensor, muted_logits: torch.Tensor, y: torch.Tensor, f_mask: torch.Tensor,
              b_drop: float, all_drops=None) -> torch.Tensor:
    """The final mask: `f_mask` for the challenged samples, all ones for the others (Sec. 3.3). `all_drops`
    maps this batch's drops of the true-class probability to the whole batch's (multi-process training)."""
    true = F.one_hot(y, logits.shape[1]).to(logits.dtype)
    drops = (logits.softmax(1) * true).sum(1) - (muted_logits.softmax(1) * true).sum(1)
    everyone = drops if all_drops is None else all_drops(drops)
    threshold = torch.quantile(everyone, 1.0 - b_drop)
    spared = (drops < threshold).to(z.dtype).unsqueeze(1)
    return torch.logical_or(f_mask.bool(), spared.bool()).to(z.dtype)


@register_algorithm
class RSC(Algorithm):
    DESCRIPTION = "Representation self-challenging: mute the features with the largest gradient on the true class"
    REFERENCE = "Huang et al., Self-Challenging Improves Cross-Domain Generalization, ECCV 2020"
    HPARAMS = {
        "rsc_f_drop_factor": HParam(1 / 3, uniform(0, 0.5)),
        "rsc_b_drop_factor": HParam(1 / 3, uniform(0, 0.5)),
    }

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        batch = concat_batches(minibatches)
        classifier = self.classifier()
        z = self.features(batch)
        if not z.requires_grad:  # a frozen backbone (`--peft linear`): eq. 1's gradient is still the features'
            z = z.detach().requires_grad_(True)
        logits = at_least_fp32(classifier(z))
        true = F.one_hot(batch.y, logits.shape[1]).to(logits.dtype)
        (grads,) = torch.autograd.grad((logits * true).sum(), z)  # eq. 1; the backbone's graph stays
        with torch.no_grad():
            f_mask = feature_mask(grads.to(logits.dtype), self.hparams["rsc_f_drop_factor"]).to(z.dtype)
            muted = at_least_fp32(classifier(z * f_mask))
            sizes, shards = split_sizes(minibatches), [b.shard for b in minibatches]

            def all_drops(drops: torch.Tensor) -> torch.Tensor:
                return torch.cat([gather_samples(d, s) for d, s in zip(drops.split(sizes), shards)])

            mask = rsc_masks(z, logits, muted, batch.y, f_mask, self.hparams["rsc_b_drop_factor"],
                             all_drops if batch.shard is not None else None)
        task = cross_entropy(classifier(z * mask), batch.y)
        aux = self.moe_aux_loss()
        self.step(task + aux)
        return {"loss": (task + aux).item(), "loss_task": task.item(), "loss_aux": aux.item(),
                "challenged": float(1.0 - mask.min(1).values.mean())}
