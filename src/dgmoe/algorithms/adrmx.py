"""ADRMX: additive disentanglement of domain features with remix loss (Demirel et al., arXiv:2308.06624), as
DomainBed implements it (the paper's equation numbers were not checked here).

Two backbones: a label backbone f_l and a domain backbone f_d (a copy of the given network, the same
initialisation). The domain-invariant feature is the difference z_inv = f_l(x) - f_d(x). A
discriminator MLP D (`mlp_width`, `mlp_depth`, `mlp_dropout`) predicts the domain from z_inv. Of every
`d_steps_per_g_step` + 1 updates, `d_steps_per_g_step` train D on CE(D(z_inv), d) (the backbones are not
updated: their features are computed without a graph); the other trains everything else on

    CE(h_1(f_l), y) + CE(h_2(z_inv), y) + dclf * CE(h_d(f_d), d) + rmxd * L_remix
    + cnt * (SupCon_lambda(f_l) + SupCon_lambda(z_inv)) - disc * CE(D(z_inv), d),

with three nonlinear heads h_1, h_2, h_d (Linear d-d/2, ReLU, Linear d/2-d/4, ReLU, Linear), a supervised
contrastive loss that weights same-domain pairs by lambda = 0.5 and others by 1 - lambda (temperature 0.07),
and the remix loss: per class, two samples a, b are drawn (a random permutation) and h_1 must predict
y_a from z_inv_a + f_d(x_b) (a sample's invariant part with another's domain part), averaged over
the number of classes. `predict` is h_1(f_l(x)): the label backbone's classifier is replaced by h_1.
Adam with betas (beta1, 0.9) and no weight decay for both optimisers, learning rate `lr` (ADRMX redefines the
shared `lr`: DomainBed's registry gives it its own values).

`adrmx_remix='domainbed'` (default) reproduces DomainBed's indexing: the two positions drawn within a
class's samples are used as positions in the whole batch (so a and b are the batch's first samples, of any
class and domain, and the target is y_a). `'paper'` maps them to the class's samples (two samples of that
class). Neither enforces different domains (the paper's description; DomainBed's comment says so too).

Any backbone: the disentanglement, the heads and the remix act on pooled features. Under multi-process
training the contrastive losses and the remix use the whole batch (features gathered from every process;
every process draws the same permutations).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, at_least_fp32, concat_batches, cross_entropy, split_sizes, trainable
from dgmoe.algorithms.dann import discriminator_mlp
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import DatasetHParams, HParam, choice, fixed
from dgmoe.moe.auxiliary import clear_aux
from dgmoe.sharding import gather_samples


def nonlinear_classifier(dim: int, n_out: int) -> nn.Sequential:
    """DomainBed's `Classifier(is_nonlinear=True)`: d -> d/2 -> d/4 -> n_out with ReLUs."""
    return nn.Sequential(nn.Linear(dim, dim // 2), nn.ReLU(), nn.Linear(dim // 2, dim // 4), nn.ReLU(),
                         nn.Linear(dim // 4, n_out))


def supcon_lambda(z: torch.Tensor, y: torch.Tensor, domains: torch.Tensor, lam: float = 0.5,
                  temperature: float = 0.07) -> torch.Tensor:
    """Supervised contrastive loss with domain weights (DomainBed's `SupConLossLambda`): with s_ij the cosine
    similarity / T and w_ij = lam (same domain) or 1 - lam, anchor i contributes
    mean_{j in P(i)} log(w_ij exp(s_ij) / (sum_{k != i} w_ik exp(s_ik) + 1e-5) + 1e-5) over its positives P(i)
    (same label, j != i); anchors without positives are skipped; the sum is negated and divided by
    (number of anchors with positives + 1)."""
    n = len(z)
    zn = F.normalize(z, p=2, dim=1)
    sim = zn @ zn.t() / temperature
    others = ~torch.eye(n, dtype=torch.bool, device=z.device)
    same_d = domains[:, None] == domains[None, :]
    weighted = torch.where(same_d, lam, 1.0 - lam).to(sim.dtype) * torch.exp(sim)
    denominator = (weighted * others).sum(1, keepdim=True) + 1e-5
    positives = (y[:, None] == y[None, :]) & others
    log_fraction = torch.log(weighted / denominator + 1e-5)
    count = positives.sum(1)
    valid = count > 0
    per_anchor = (log_fraction * positives).sum(1)[valid] / count[valid]
    return -per_anchor.sum() / (int(valid.sum()) + 1)


def remix_pairs(y: torch.Tensor, num_classes: int, mode: str) -> list[tuple[int, int]]:
    """One (a, b) pair per class with at least two samples, from one `randperm` per class in class order."""
    pairs = []
    for c in range(num_classes):
        members = torch.where(y == c)[0]
        perm = torch.randperm(members.numel())
        if len(perm) < 2:
            continue
        a, b = int(perm[0]), int(perm[1])
        pairs.append((int(members[a]), int(members[b])) if mode == "paper" else (a, b))
    return pairs


@register_algorithm
class ADRMX(Algorithm):
    DESCRIPTION = "ADRMX: subtract a domain backbone's features, adversarially and contrastively, and remix them"
    REFERENCE = "Demirel et al., ADRMX: Additive Disentanglement of Domain Features with Remix Loss, arXiv:2308.06624"
    MIN_TRAIN_DOMAINS = 2
    OVERRIDES = ("lr",)
    HPARAMS = {
        "cnt_lambda": HParam(1.0, choice([1.0])),
        "dclf_lambda": HParam(1.0, choice([1.0])),
        "disc_lambda": HParam(0.75, choice([0.75])),
        "rmxd_lambda": HParam(1.0, choice([1.0])),
        "d_steps_per_g_step": HParam(2, choice([2])),
        "beta1": HParam(0.5, choice([0.5])),
        "mlp_width": HParam(256, choice([256])),
        "mlp_depth": HParam(9, choice([8, 9, 10])),
        "mlp_dropout": HParam(0.0, choice([0])),
        "adrmx_remix": HParam("domainbed", fixed("domainbed")),
    }

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        specs = dict(cls.HPARAMS)
        if dataset.small_images:
            specs["lr"] = HParam(3e-3, choice([5e-4, 1e-3, 2e-3, 3e-3]))
        else:
            specs["lr"] = HParam(3e-5, choice([2e-5, 3e-5, 4e-5, 5e-5]))
        return specs

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        hp = self.hparams
        if hp["adrmx_remix"] not in ("domainbed", "paper"):
            raise ValueError(f"adrmx_remix must be 'domainbed' or 'paper', got {hp['adrmx_remix']!r}")
        dim = network.num_features
        self.domain_network = copy.deepcopy(network)
        if hasattr(self.domain_network, "reset_classifier"):
            self.domain_network.reset_classifier(0)  # its features only
        replace_classifier(network, nonlinear_classifier(dim, num_classes))
        self.classifier_final = nonlinear_classifier(dim, num_classes)
        self.classifier_domain = nonlinear_classifier(dim, num_domains)
        self.discriminator = discriminator_mlp(dim, num_domains, hp["mlp_width"], hp["mlp_depth"], hp["mlp_dropout"])
        betas = (hp["beta1"], 0.9)
        self.disc_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=hp["lr"], betas=betas)
        params = [*self.network.parameters(), *self.domain_network.parameters(), *self.classifier_final.parameters(),
                  *self.classifier_domain.parameters()]
        self.optimizer = torch.optim.Adam(trainable(params), lr=hp["lr"], betas=betas)
        self.count_updates()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer, "discriminator": self.disc_optimizer}

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        self.update_count += 1
        hp = self.hparams
        batch = concat_batches(minibatches)
        domains = torch.cat([torch.full((len(b.y),), i, dtype=torch.long, device=b.y.device)
                             for i, b in enumerate(minibatches)])
        d_steps = hp["d_steps_per_g_step"]
        if int(self.update_count) % (1 + d_steps) < d_steps:
            with torch.no_grad():  # the backbones are not updated on discriminator turns
                z_inv = self.features(batch) - self.features(batch, network=self.domain_network)
            clear_aux(self)
            disc_loss = cross_entropy(self.discriminator(z_inv), domains)
            self.step(disc_loss, self.disc_optimizer)
            self.disc_optimizer.zero_grad(set_to_none=True)
            return {"loss": disc_loss.item(), "loss_disc": disc_loss.item()}
        z_label = self.features(batch)
        z_domain = self.features(batch, network=self.domain_network)
        z_inv = z_label - z_domain
        disc_loss = cross_entropy(self.discriminator(z_inv), domains)
        loss_domain = cross_entropy(self.classifier_domain(z_domain), domains)
        loss_int = cross_entropy(self.classifier()(z_label), batch.y)
        loss_final = cross_entropy(self.classifier_final(z_inv), batch.y)
        # the whole batch for the pairwise terms (every process's samples under multi-process training)
        sizes, shards = split_sizes(minibatches), [b.shard for b in minibatches]

        def whole(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([gather_samples(p, s) for p, s in zip(t.split(sizes), shards)])

        all_label, all_inv, all_domain = (whole(at_least_fp32(t)) for t in (z_label, z_inv, z_domain))
        all_y, all_d = whole(batch.y), whole(domains)
        cnt_int = supcon_lambda(all_label, all_y, all_d)
        cnt_final = supcon_lambda(all_inv, all_y, all_d)
        remix = all_inv.new_zeros(())
        for a, b in remix_pairs(all_y, self.num_classes, hp["adrmx_remix"]):
            remix = remix + cross_entropy(self.classifier()((all_inv[a] + all_domain[b]).view(1, -1)), all_y[a].view(1))
        remix = remix / self.num_classes
        aux = self.moe_aux_loss() + self.moe_aux_loss(self.domain_network)
        loss = (loss_int + loss_final + hp["dclf_lambda"] * loss_domain + hp["rmxd_lambda"] * remix
                + hp["cnt_lambda"] * (cnt_int + cnt_final) - hp["disc_lambda"] * disc_loss + aux)
        self.disc_optimizer.zero_grad(set_to_none=True)
        self.step(loss)
        self.zero_grad(set_to_none=True)
        return {"loss": loss.item(), "loss_cnt_int": cnt_int.item(), "loss_cnt_final": cnt_final.item(),
                "loss_clf_int": loss_int.item(), "loss_clf_fin": loss_final.item(), "loss_dmn": loss_domain.item(),
                "loss_disc": disc_loss.item(), "loss_remixed": remix.item(), "loss_aux": aux.item()}


def replace_classifier(network: nn.Module, head: nn.Module) -> None:
    """Put `head` where the network's `get_classifier()` module is (timm API: `head` or `fc`)."""
    backbone: Any = network  # timm's API, not declared by nn.Module
    current = backbone.get_classifier()
    for name, child in network.named_children():
        if child is current:
            setattr(network, name, head)
            return
    raise ValueError(f"cannot find the classifier of {type(network).__name__} among its direct children")
