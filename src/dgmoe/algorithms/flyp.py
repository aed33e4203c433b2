"""FLYP (Goyal et al., "Finetune like you pretrain: Improved finetuning of zero-shot vision models", CVPR 2023):
fine-tune both CLIP towers with CLIP's own contrastive loss against class-name captions, as locuslab/FLYP's
`flyp_loss` trains them.

- **Loss** (their `ClipLoss` without ground labels, Radford et al.'s Eq.): the batch's normalised image features
  f_i and the normalised text features g_i of each image's caption; logits s * f_i . g_j with s = exp(logit_scale)
  (the text tower's, trained); the mean of the image->text and text->image cross-entropies against the diagonal.
  Captions: the image's class name in one of the run's prompt templates (`--prompt-templates`), drawn per image
  (FLYP writes a caption file per dataset from such templates).
- **Trained**: the image tower (or its `--peft` parameters) and the whole text tower, with the run's optimiser
  (dgmoe's Adam, `lr`, `weight_decay`; FLYP uses AdamW with a cosine schedule). The run's head is not trained:
  when the algorithm is switched to evaluation after updates, the head is rewritten as the zero-shot classifier
  of the current text tower (the class names in every template, `dgmoe.models.clip.zero_shot.init_text_head`), which
  is how FLYP evaluates; saved weights therefore hold the image tower and that head.
- **Needs** `--head zeroshot` on a CLIP tower: the run hands the algorithm the text tower that wrote the head
  (read with the image tower from one full CLIP file) and the head's class names and templates (`attach_run`,
  a `dgmoe.algorithms.base.RunContext`). WiSE-FT (`dgmoe soup --method
  wise-ft`) of FLYP runs interpolates the image towers and the heads, not the text towers (FLYP's WiSE-FT
  interpolates both towers).

Checked against the authors' code: the loss by a fixture recorded from their `ClipLoss` (tests/parity).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from dgmoe.algorithms.base import Algorithm, Metrics, RunContext, at_least_fp32, concat_batches, detached
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.errors import UsageError


def clip_loss(image_features: torch.Tensor, text_features: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric contrastive loss over a batch of (image, caption) pairs (features not yet normalised)."""
    f, g = F.normalize(image_features, dim=-1), F.normalize(text_features, dim=-1)
    logits = scale * f @ g.T
    labels = torch.arange(len(f), device=f.device)
    return (F.cross_entropy(at_least_fp32(logits), labels) + F.cross_entropy(at_least_fp32(logits.T), labels)) / 2


@register_algorithm
class FLYP(Algorithm):
    DESCRIPTION = "FLYP: both CLIP towers fine-tuned with CLIP's contrastive loss against class-name captions"
    REFERENCE = ("Goyal et al., Finetune like you pretrain: Improved finetuning of zero-shot vision models, "
                 "CVPR 2023")
    NEEDS_TEXT_HEAD = True

    text_tower: Any  # a `dgmoe.models.clip.text_tower.TextTransformer`, set by `attach_run`
    class_tokens: torch.Tensor

    def __init__(self, network, num_classes, num_domains, hparams):
        from dgmoe.models.clip.zero_shot import TextHead

        if not isinstance(network.get_classifier(), TextHead):
            raise UsageError("FLYP needs CLIP's text tower and the class names: train with --head zeroshot on a "
                             "CLIP image tower")
        network.get_classifier().requires_grad_(False)  # rewritten from the text tower, never trained
        super().__init__(network, num_classes, num_domains, hparams)
        self.head_stale = False  # updates since the head was last written from the text tower
        self.names: Sequence[str] = ()
        self.templates: Sequence[str] = ()

    def attach_run(self, run: RunContext) -> None:
        """Take the text tower that wrote the head (trained from here on, in the shared optimiser) and the prompts
        of every class (the head's class names in each of its templates)."""
        from dgmoe.models.clip.templates import templates
        from dgmoe.models.clip.tokenizer import clip_tokenizer

        if run.text_head is None or run.text_tower is None:
            raise UsageError("FLYP trains the text tower that wrote its head: build the network with its zero-shot "
                             "head written (--head zeroshot), not a head whose weights follow")
        tower = run.text_tower
        self.text_tower = tower.to(next(self.network.parameters()).device)
        self.names, self.templates = run.text_head.class_names, templates(run.text_head.templates)
        tokens = clip_tokenizer()([t.format(n) for n in self.names for t in self.templates])
        self.register_buffer("class_tokens", tokens.reshape(len(self.names), len(self.templates), -1).to(
            next(self.network.parameters()).device))
        self.optimizer.add_param_group({"params": [p for p in tower.parameters() if p.requires_grad]})

    def _captions(self, y: torch.Tensor) -> torch.Tensor:
        pick = torch.randint(0, self.class_tokens.shape[1], (len(y),)).to(y.device)
        return self.class_tokens[y, pick]

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        if not hasattr(self, "text_tower"):
            raise RuntimeError("FLYP.update before attach_run: the run hands it the text tower (--head zeroshot)")
        batch = concat_batches(minibatches)
        if batch.shard is not None:
            raise UsageError("FLYP's contrastive loss takes its negatives from the whole batch; dgmoe runs it in "
                             "one process (multi-process training would use each process's share only)")
        task = clip_loss(self.features(batch), self.text_tower(self._captions(batch.y)),
                         self.text_tower.logit_scale.exp())
        aux = self.moe_aux_loss()
        self.step(task + aux)
        self.head_stale = True
        return detached(loss=task + aux, loss_task=task, loss_aux=aux)

    def train(self, mode: bool = True) -> "FLYP":
        super().train(mode)
        if not mode and getattr(self, "head_stale", False):  # evaluation after updates: the head is the current
            from dgmoe.models.clip.zero_shot import init_text_head  # text tower's classifier (loaded weights are kept)

            init_text_head(self.network, self.text_tower, self.names, self.templates)
            self.head_stale = False
        return self
