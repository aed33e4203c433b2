"""Meta-learning domain generalisation, MLDG (Li et al., AAAI 2018, Algorithm 1), first order, as DomainBed.

For each (meta-train i, meta-test j) pair the network is copied, the copy takes one inner step on domain i
(theta' = step(theta, grad L_i)), and the outer gradient gets grad L_i(theta) + beta grad L_j(theta'), the
first-order approximation DomainBed uses (no second derivatives). As DomainBed, the sum over pairs is
divided by the number of training domains (not of pairs): with weight decay in Adam the scale matters.

Inner step: `mldg_inner_optimizer='adam'` (DomainBed: a freshly created Adam, i.e. an Adam first step of
size ~lr) or `'sgd'` (the paper: theta - lr * grad). Splits (DomainBed's `split_meta_train_test`): the
domains are shuffled, the last `n_meta_test` (default 2) are the meta-test domains, the others meta-train,
and every meta-train domain is paired with a meta-test domain in turn. With `n_meta_test` >= the number of
training domains there is no meta-train domain and, as in DomainBed, an update only applies weight decay
(a warning says so).
"""
from __future__ import annotations

import copy
import logging
from itertools import cycle

import torch

from dgmoe.algorithms.base import Algorithm, cross_entropy, trainable
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, choice, fixed, log_uniform, non_negative, one_of, positive

log = logging.getLogger(__name__)


def meta_splits(n: int, n_meta_test: int) -> list[tuple[int, int]]:
    """(meta-train, meta-test) domain pairs over a random permutation of the n domains."""
    perm = torch.randperm(n).tolist()
    return list(zip(perm[: max(n - n_meta_test, 0)], cycle(perm[-n_meta_test:])))


@register_algorithm
class MLDG(Algorithm):
    DESCRIPTION = "Meta-learning DG: a step on meta-train domains must also lower the meta-test loss (first order)"
    REFERENCE = "Li et al., Learning to Generalize: Meta-Learning for Domain Generalization, AAAI 2018"
    MIN_TRAIN_DOMAINS = 2
    HPARAMS = {
        "mldg_beta": HParam(1.0, log_uniform(-1, 1), non_negative),
        "n_meta_test": HParam(2, choice([1, 2]), positive),
        "mldg_inner_optimizer": HParam("adam", fixed("adam"), one_of("adam", "sgd")),
    }

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        if self.hparams["n_meta_test"] >= num_domains:
            log.warning("MLDG: n_meta_test=%d leaves no meta-train domain among %d training domains; as in "
                        "DomainBed, updates will only apply weight decay", self.hparams["n_meta_test"], num_domains)

    def _inner_step(self, inner: torch.nn.Module) -> None:
        lr = self.hparams["lr"]
        if self.hparams["mldg_inner_optimizer"] == "sgd":
            with torch.no_grad():
                for p in inner.parameters():
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-lr)
        elif self.hparams["mldg_inner_optimizer"] == "adam":
            torch.optim.Adam(trainable(inner.parameters()), lr=lr, weight_decay=self.hparams["weight_decay"]).step()
        else:
            raise ValueError(
                f"mldg_inner_optimizer must be 'adam' or 'sgd', got {self.hparams['mldg_inner_optimizer']!r}")

    def _update(self, minibatches: list[Batch], step: int) -> dict[str, float]:
        beta = self.hparams["mldg_beta"]
        params = [p for p in self.network.parameters() if p.requires_grad]
        total = [torch.zeros_like(p) for p in params]
        pairs = meta_splits(len(minibatches), self.hparams["n_meta_test"])
        loss_train = loss_test = loss_aux = 0.0
        for i, j in pairs:
            n = min(len(minibatches[i]), len(minibatches[j]))
            bi, bj = minibatches[i].head(n), minibatches[j].head(n)
            # registered while it lives, so that `sync_gradients` averages the inner gradients over processes
            self.inner = inner = copy.deepcopy(self.network)
            task_i = cross_entropy(self.logits(bi, network=inner), bi.y)
            aux = self.moe_aux_loss(inner)
            inner_trainable = [p for p in inner.parameters() if p.requires_grad]
            grads_i = torch.autograd.grad(task_i + aux, inner_trainable, allow_unused=True)
            for p, g in zip(inner_trainable, grads_i):
                p.grad = None if g is None else g.clone()
            self.sync_gradients()
            self._inner_step(inner)
            task_j = cross_entropy(self.logits(bj, network=inner), bj.y)
            grads_j = torch.autograd.grad(task_j, inner_trainable, allow_unused=True)
            del self.inner
            for acc, gi, gj in zip(total, grads_i, grads_j):
                if gi is not None:
                    acc.add_(gi)
                if gj is not None:
                    acc.add_(gj, alpha=beta)
            loss_train += task_i.item()
            loss_test += task_j.item()
            loss_aux += aux.item()
        n = len(minibatches)
        self.optimizer.zero_grad(set_to_none=True)
        for p, g in zip(params, total):
            p.grad = g / n
        self.sync_gradients()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # no stale gradients in the next update's copies
        return {"loss": (loss_train + beta * loss_test + loss_aux) / n, "loss_meta_train": loss_train / n,
                "loss_meta_test": loss_test / n, "loss_aux": loss_aux / n}
