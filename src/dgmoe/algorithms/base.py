"""The algorithm interface: a DG method wraps any backbone and owns its optimisation step.

Backbones follow timm's API: `forward_features(x)` gives tokens or feature maps, `forward_head(t,
pre_logits=True)` pools them to a feature vector and `get_classifier()` is the final linear layer. Models
that route on metadata (MoGE) set `uses_metadata = True` and take `forward_features(x, meta=...)`.

The backbone's auxiliary losses come from its sparse layers (`dgmoe.moe.auxiliary`: named terms such as GMoE's
load balancing and MoGE's expert diversity, each weighted by its hyperparameter); every objective that
updates the backbone adds `self.moe_aux_loss()` exactly once. The base `update` clears the layers'
records before and after the subclass step, so repeated forwards in one update are averaged, not double
counted, and no autograd graph outlives an update.

Hooks for the training engine (all optional; the defaults do nothing):

- `attach_run(run)`: once built, before any update or resume, the algorithm receives what the run knows beyond
  its network (`RunContext`: the run's number of updates, its zero-shot head's spec and the text tower that
  wrote it); FLYP takes its text tower from it, CLIPood its step count.
- `update(minibatches, step)`: one optimisation step; `minibatches` holds one `Batch` per training domain,
  in the same order every step. Returns its metrics (`Metrics`): floats, or detached 0-dim tensors, which
  cost no host synchronisation (ERM and MoGE do; the engine reads them back at checkpoints).
- `predict(x, meta)`: logits of the model to *evaluate* (SWAD/SMA: the averaged weights). Called under
  `eval()` and `torch.no_grad()`.
- `inference_network()`: the network `predict` uses (saved as the run's model weights).
- `predict_online(x, meta)`: logits of the weights being trained. Algorithms with `NEEDS_VAL_LOSS = True`
  (SWAD) need the validation loss of these weights at every checkpoint.
- `on_checkpoint(step, val_loss)`: called at every checkpoint, after the engine has computed `val_loss` =
  mean cross-entropy of `predict_online` over the held-out ("out") splits of the training domains
  (`None` when the engine has none), and *before* the checkpoint's accuracies are computed with `predict`.
- `stop_requested`: True once further training cannot change the evaluated model (SWAD after the end of
  its loss valley); the engine may stop early.
- `optimizers()`: every optimiser whose state must be saved and restored with the run.
- `checkpoint_record()`: extra numbers for the checkpoint's record (call after `on_checkpoint`).

State: all algorithm state (counters, averaged weights, moving averages) lives in registered buffers or
submodules, so `state_dict()` / `load_state_dict()` save and resume it; the entries are plain tensors
(loadable with `torch.load(weights_only=True)` and storable with safetensors).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.data.base import Batch
from dgmoe.hparams import DatasetHParams, HParam
from dgmoe.moe.auxiliary import clear_aux, weighted_aux_loss
from dgmoe.sharding import concat_shards, global_mean, use_shard

if TYPE_CHECKING:
    from dgmoe.models.clip.head_spec import TextHeadSpec

#: what an update returns: named floats, or 0-dim tensors that the engine reads back only at log points (a
#: tensor left on a GPU costs no host synchronisation; `.item()` does). Return `detached(...)` values.
Metrics = Mapping[str, "float | torch.Tensor"]


def detached(**values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Metrics that stay on the device: each value detached from the graph."""
    return {name: value.detach() for name, value in values.items()}


@dataclass(frozen=True)
class RunContext:
    """What a run hands its algorithm once both are built (`Algorithm.attach_run`): its number of updates
    (`--steps` or the catalogue's), its zero-shot head (`text_head`, None for a linear head) and the CLIP text
    tower that wrote that head (None without one: a head whose weights follow)."""

    n_steps: int
    text_head: "TextHeadSpec | None" = None
    text_tower: nn.Module | None = None


class Algorithm(nn.Module):
    """Base class. Subclasses implement `_update` and may override `predict`."""

    HPARAMS: ClassVar[dict[str, HParam]] = {}
    OVERRIDES: ClassVar[tuple[str, ...]] = ()  # shared hyperparameters this algorithm redefines
    MIN_TRAIN_DOMAINS: ClassVar[int] = 1
    NEEDS_VAL_LOSS: ClassVar[bool] = False
    #: the network's head must be a text head (`--head zeroshot`; CLIPood reads the class-name embeddings)
    NEEDS_TEXT_HEAD: ClassVar[bool] = False
    #: why a run's length is part of this algorithm, so that `--extend` is refused (CLIPood: "weighs every update
    #: by the run's length"); "" for an algorithm whose runs can be lengthened
    LENGTH_BOUND: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""
    REFERENCE: ClassVar[str] = ""

    gradient_sync: Any = None
    update_count: torch.Tensor  # registered by `count_updates()` in the algorithms that read it

    def __init__(self, network: nn.Module, num_classes: int, num_domains: int, hparams: dict[str, Any]):
        super().__init__()
        if num_domains < self.MIN_TRAIN_DOMAINS:
            raise ValueError(
                f"{type(self).__name__} needs at least {self.MIN_TRAIN_DOMAINS} training domains, got {num_domains}"
                " (choose fewer --test-envs or another algorithm)"
            )
        missing = [k for k in self.HPARAMS if k not in hparams]
        if missing:
            raise KeyError(f"{type(self).__name__} is missing hyperparameters {missing}; build them with "
                           "dgmoe.hparams.default_hparams / run_hparams")
        self.network = network
        self.num_classes = num_classes
        self.num_domains = num_domains
        self.hparams = dict(hparams)
        self.per_domain_forward = has_batch_statistics(network)
        self.optimizer = self.make_optimizer(self.network.parameters())

    @classmethod
    def hparam_specs(cls, dataset: DatasetHParams, shared: Mapping[str, HParam]) -> dict[str, HParam]:
        """This algorithm's hyperparameters on a dataset with the facts `dataset` (its catalogue entry's
        `hparams`; its per-algorithm entries are applied afterwards by `dgmoe.engine.hparams`), given the
        `shared` ones every run has. Names in `shared` may be returned only if listed in `OVERRIDES`."""
        return dict(cls.HPARAMS)

    def attach_run(self, run: RunContext) -> None:
        """What the run knows beyond the network (`RunContext`), handed over once, before any update or resume;
        the default reads none of it."""

    # ----- building blocks -------------------------------------------------------------------
    def count_updates(self) -> None:
        """Register `update_count`, the number of updates made so far, as a buffer (saved and resumed with the
        algorithm) for penalty warm-ups and alternating steps to read; the algorithm increments it."""
        self.register_buffer("update_count", torch.zeros((), dtype=torch.long))

    def make_optimizer(self, params: Iterable) -> torch.optim.Optimizer:
        return torch.optim.Adam(trainable(params), lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"])

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimiser with state to save and resume (names are stable keys for checkpoints)."""
        return {"optimizer": self.optimizer}

    def use_fused_optimizers(self) -> None:
        """Run every optimiser of `optimizers()` on torch's fused kernel (`--fused-optimizer`). Optimisers an
        update makes afresh (MLDG's and Fish's inner ones) keep torch's default, and a saved state that is not
        an optimiser (Fish's inner Adam moments) is left as it is."""
        for optimizer in self.optimizers().values():
            if isinstance(optimizer, torch.optim.Optimizer):
                use_fused_kernel(optimizer)

    @staticmethod
    def reset_optimizer_state(optimizer: torch.optim.Optimizer, lr: float | None = None) -> None:
        """Forget Adam's moments in place, as DomainBed's re-created optimiser at the end of a penalty
        warm-up ("Adam doesn't like the sharp jump in gradient magnitudes"), optionally with a new lr."""
        optimizer.state.clear()
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr

    def features(self, x: torch.Tensor | Batch, meta: dict[str, torch.Tensor] | None = None,
                 network: nn.Module | None = None) -> torch.Tensor:
        """Pooled features of images `x`, or of a `Batch` (its metadata and, under multi-process training,
        its shard: the forward's per-sample randomness and MoE statistics are then the global batch's)."""
        shard = None
        if isinstance(x, Batch):
            batch = x
            x, meta, shard = batch.x, batch.meta, batch.shard
        net: Any = network if network is not None else self.network  # timm's API, not declared by nn.Module
        with use_shard(shard):
            if getattr(net, "uses_metadata", False):
                tokens = net.forward_features(x, meta=meta)
            else:
                tokens = net.forward_features(x)
            return net.forward_head(tokens, pre_logits=True)

    def classifier(self, network: nn.Module | None = None) -> nn.Module:
        net: Any = network if network is not None else self.network  # timm's API, not declared by nn.Module
        return net.get_classifier()

    def logits(self, x: torch.Tensor | Batch, meta: dict[str, torch.Tensor] | None = None,
               network: nn.Module | None = None) -> torch.Tensor:
        return self.classifier(network)(self.features(x, meta, network))

    def domain_features(self, minibatches: list[Batch]) -> list[torch.Tensor]:
        """Each training domain's features. One forward over the concatenated batch, or one forward per
        domain when the backbone has BatchNorm, so that its batch statistics stay per domain as in
        DomainBed's GroupDRO, CORAL, MMD and Mixup (for other backbones the two are the same numbers)."""
        if self.per_domain_forward:
            return [self.features(b) for b in minibatches]
        return list(self.features(concat_batches(minibatches)).split(split_sizes(minibatches)))

    def moe_aux_loss(self, network: nn.Module | None = None) -> torch.Tensor:
        """The sparse layers' auxiliary terms, each times its weight: lambda * sum over MoE layers of
        0.5 * (L_imp + L_load) (GMoE App. C.4), plus lambda_CKA * L_CKA for MoGE layers (eq. 4)."""
        return weighted_aux_loss(network if network is not None else self.network, self.hparams)

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer | None = None) -> None:
        optimizer = optimizer if optimizer is not None else self.optimizer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.sync_gradients()
        optimizer.step()

    def sync_gradients(self) -> None:
        """Average the gradients of every registered parameter over processes; `gradient_sync` is set by
        the engine under torchrun (a no-op otherwise). Call it between backward and an optimiser step."""
        if self.gradient_sync is not None:
            self.gradient_sync()

    # ----- interface -------------------------------------------------------------------------
    def update(self, minibatches: list[Batch], step: int = 0) -> Metrics:
        if len(minibatches) != self.num_domains:
            raise ValueError(f"{type(self).__name__}.update got {len(minibatches)} minibatches but was built for "
                             f"{self.num_domains} training domains (one minibatch per training domain)")
        clear_aux(self)
        try:
            return self._update(minibatches, step)
        finally:
            clear_aux(self)

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        raise NotImplementedError

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta)

    def predict_online(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta)

    def inference_network(self) -> nn.Module:
        """The network `predict` evaluates (SWAD/SMA: the averaged copy); the engine saves its weights."""
        return self.network

    def on_checkpoint(self, step: int, val_loss: float | None) -> None:
        """Called by the engine at every checkpoint (see the module docstring)."""

    @property
    def stop_requested(self) -> bool:
        return False

    def checkpoint_record(self) -> dict[str, float]:
        """Numbers about the algorithm's state to add to the checkpoint's record (e.g. SWAD's window)."""
        return {}



#: the optimisers with a fused kernel in torch (`fused=True`, on CUDA and on the CPU)
FUSABLE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def use_fused_kernel(optimizer: torch.optim.Optimizer) -> None:
    """Switch `optimizer` to torch's fused kernel, setting its options as `fused=True` at construction sets
    them: one kernel per parameter group and step, instead of torch's default (DomainBed's), which is a few
    multi-tensor kernels per step on CUDA with milliseconds of Python around them, and a loop over the
    parameters on the CPU. The same update, rounded differently. Call it before the first step: the fused
    kernel keeps its step counts on the parameters' device (a resumed state is moved there on loading).
    Idempotent."""
    if not isinstance(optimizer, FUSABLE):
        names = ", ".join(cls.__name__ for cls in FUSABLE)
        raise ValueError(f"{type(optimizer).__name__} has no fused kernel in torch (those that do: {names})")
    groups = (optimizer.defaults, *optimizer.param_groups)
    if all(options.get("fused") for options in groups):
        return  # already fused
    if optimizer.state:
        raise RuntimeError("use_fused_kernel on an optimiser that has already stepped; call it before the first step")
    for options in groups:
        if options.get("differentiable"):
            raise ValueError("a differentiable optimiser cannot use the fused kernel")
        options["fused"], options["foreach"] = True, None


def trainable(params: Iterable) -> list:
    """The parameters an optimiser receives: those with `requires_grad` (a parameter-efficient backbone's
    frozen weights are left out, `dgmoe.models.peft`); param-group dicts are filtered in place. Nothing
    trainable gives one empty group (an optimiser whose steps do nothing, e.g. SagNet's featurizer optimiser
    under a linear probe) rather than torch's error."""
    out: list = []
    for item in params:
        if isinstance(item, dict):
            out.append({**item, "params": [p for p in item["params"] if p.requires_grad]})
        elif item.requires_grad:
            out.append(item)
    return out if out else [{"params": []}]


def has_batch_statistics(network: nn.Module) -> bool:
    """True when a forward's output depends on which samples share the batch (BatchNorm layers)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in network.modules())


def concat_batches(minibatches: list[Batch]) -> Batch:
    meta = None
    if minibatches[0].meta is not None:
        # the minibatches of a step come from one dataset: all carry metadata or none does
        metas = cast(list[dict[str, torch.Tensor]], [b.meta for b in minibatches])
        meta = {k: torch.cat([m[k] for m in metas]) for k in metas[0]}
    return Batch(torch.cat([b.x for b in minibatches]), torch.cat([b.y for b in minibatches]), meta,
                 concat_shards([b.shard for b in minibatches]))


def split_sizes(minibatches: list[Batch]) -> list[int]:
    return [len(b.y) for b in minibatches]


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """`t` in float32 when it is half or bfloat16 (autocast outputs); float32 and float64 stay as they are."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(at_least_fp32(logits), y)


def domain_risk(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy over a domain's minibatch: under multi-process training, the whole minibatch's
    (every process gets the same value)."""
    if batch.shard is None:
        return cross_entropy(logits, batch.y)
    return global_mean(F.cross_entropy(at_least_fp32(logits), batch.y, reduction="none"), batch.shard)


def per_domain_risks(logits: torch.Tensor, minibatches: list[Batch]) -> torch.Tensor:
    """`domain_risk` of every training domain, from the logits of their concatenation: [num_domains]."""
    return torch.stack([domain_risk(lg, b) for lg, b in zip(logits.split(split_sizes(minibatches)), minibatches)])


def frozen_copy(network: nn.Module) -> nn.Module:
    """A deep copy with gradients off (averaged weights, reference featurizers)."""
    import copy

    clone = copy.deepcopy(network)
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone


def penalty_weight(update_count: int, anneal_iters: int, weight: float, before: float) -> float:
    """DomainBed's penalty warm-up: `before` for the first `anneal_iters` updates, then `weight`."""
    return weight if update_count >= anneal_iters else before

