"""Zero-shot and text-initialised heads from CLIP's text tower (Radford et al., ICML 2021, §3.1.2, §3.1.4).

For each class, every prompt template filled with its name is encoded by the text tower and L2-normalised; the
class embedding is their mean, normalised again (the prompt ensemble "over the embedding space", §3.1.4;
open_clip's `build_zero_shot_classifier`). The head is a linear layer on the *normalised* image feature whose
weight is the class embeddings times `exp(logit_scale)` and whose bias is zero, so its logits are CLIP's,
`exp(logit_scale) * <f(x)/|f(x)|, t_c>` (WiSE-FT's `ClassificationHead(normalize=True)`, Wortsman et al., CVPR
2022). Trained on like any head it is a text-initialised head (LP-FT's, WiSE-FT's and FLYP's starting point);
untrained (`--steps 0`) it is CLIP's zero-shot classifier.

`create_model(..., text_head=spec)` builds a model whose classifier is a `TextHead` and writes it
(`dgmoe.models.clip.head_spec`); `text_head=True` builds the head's shape only (a run's weights load back into
it). `init_text_head` writes the text classifier into a `TextHead`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from dgmoe.errors import UsageError
from dgmoe.models.clip.text_tower import TextTransformer
from dgmoe.models.clip.tokenizer import clip_tokenizer

Tokenize = Callable[[Sequence[str]], torch.Tensor]


class TextHead(nn.Linear):
    """A linear classifier on the L2-normalised feature: logits = W f(x)/|f(x)| + b (WiSE-FT's
    `ClassificationHead(normalize=True)`); the same parameters (`weight`, `bias`) as the linear head it replaces."""

    #: what a checkpoint's load report says writes it (`dgmoe.models.pretrained.LoadReport.written_later`)
    written_from = "the text tower (CLIP's zero-shot classifier)"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.normalize(x, dim=-1))


def classifier_name(model: nn.Module) -> str:
    return getattr(getattr(model, "info", None), "classifier", "head")


def use_text_head(model: nn.Module) -> nn.Module:
    """Replace `model`'s linear classifier by a `TextHead` of the same shape (its weights still to come: from
    `init_text_head` or a run's weights file); returns `model`."""
    name = classifier_name(model)
    head = getattr(model, name, None)
    if not isinstance(head, nn.Linear):
        raise UsageError(f"a text head replaces the model's linear classifier '{name}'; {type(model).__name__} "
                         f"has {type(head).__name__} there (a model built with num_classes=0?)")
    setattr(model, name, TextHead(head.in_features, head.out_features, bias=head.bias is not None))
    return model


@torch.no_grad()
def class_embeddings(tower: TextTransformer, class_names: Sequence[str], templates: Sequence[str],
                     tokenize: Tokenize | None = None, batch_classes: int = 10) -> torch.Tensor:
    """[classes, embed] normalised mean of each class's normalised prompt embeddings (open_clip's
    `build_zero_shot_classifier`, transposed). `tokenize`: CLIP's tokenizer unless given."""
    if not class_names or not templates:
        raise UsageError("a text head needs at least one class name and one prompt template")
    if tokenize is None:
        tokenize = clip_tokenizer()
        if tower.config.vocab_size < tokenize.vocab_size:
            raise UsageError(f"the text tower has {tower.config.vocab_size} token ids but CLIP's tokenizer has "
                             f"{tokenize.vocab_size}: not a CLIP text tower")
    device = next(tower.parameters()).device
    out = []
    for start in range(0, len(class_names), batch_classes):
        names = class_names[start:start + batch_classes]
        texts = [template.format(name) for name in names for template in templates]
        ids = tokenize(texts)
        # the end token's feature sees only the tokens up to it (causal mask): the context can stop at the last one
        ids = ids[:, :int(ids.argmax(dim=-1).max()) + 1]
        emb = F.normalize(tower(ids.to(device)), dim=-1)
        out.append(F.normalize(emb.reshape(len(names), len(templates), -1).mean(dim=1), dim=-1))
    return torch.cat(out)


@torch.no_grad()
def init_text_head(model: nn.Module, tower: TextTransformer, class_names: Sequence[str], templates: Sequence[str],
                   tokenize: Tokenize | None = None) -> torch.Tensor:
    """Write CLIP's zero-shot classifier into `model`'s `TextHead`: weight = exp(logit_scale) x the class
    embeddings, bias 0. Returns the class embeddings."""
    head = getattr(model, classifier_name(model))
    if not isinstance(head, TextHead):
        raise UsageError("init_text_head needs a model built with a text head (create_model(..., text_head=...))")
    if head.in_features != tower.config.embed_dim:
        raise UsageError(f"the image features are {head.in_features}-d but the text tower embeds to "
                         f"{tower.config.embed_dim}-d: a text head needs the CLIP image tower with its projection")
    if head.out_features != len(class_names):
        raise UsageError(f"the head has {head.out_features} classes but {len(class_names)} class names were given")
    emb = class_embeddings(tower, class_names, templates, tokenize)
    head.weight.copy_(tower.logit_scale.exp() * emb.to(head.weight))
    if head.bias is not None:
        head.bias.zero_()
    return emb
