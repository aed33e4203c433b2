"""Matching annotated parts to ViT patches and counting which expert serves them (GMoE §5.4, Fig. 3b).

Coordinates are *normalised*: (x, y) in [0, 1] relative to the image width and height, so they survive the
square resize every dgmoe dataset applies. Patches are numbered row-major over a `(gh, gw)` grid, patch
(i, j) having centre ((j + 0.5) / gw, (i + 0.5) / gh); distances are measured in patch units.

GMoE §5.4: "we first match a visual attribute with its nearest 9 patches, and then correlate the visual
attribute and its current 9 patches' experts". `part_expert_histogram` does exactly that: every visible
part adds one count per nearest patch to `hist[part, expert of that patch]`. Fig. 3b has a 16th row,
"background": here the patches whose centre lies outside the bird's bounding box (or, with no boxes, the
patches matched to no visible part), each counted once.
"""
from __future__ import annotations

import torch

NEAREST_PATCHES = 9


def patch_centers(grid_size: tuple[int, int]) -> torch.Tensor:
    """`[gh * gw, 2]` normalised (x, y) centres of the patches, row-major."""
    gh, gw = grid_size
    ys = (torch.arange(gh, dtype=torch.float64) + 0.5) / gh
    xs = (torch.arange(gw, dtype=torch.float64) + 0.5) / gw
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=-1)


def nearest_patches(points: torch.Tensor, grid_size: tuple[int, int], k: int = NEAREST_PATCHES) -> torch.Tensor:
    """Indices `[..., k]` of the k patches whose centres are nearest each normalised point `[..., 2]`.

    Distances are in patch units; ties go to the lower patch index, so a point at a patch centre gets
    exactly its 3x3 neighbourhood for k = 9.
    """
    gh, gw = grid_size
    if points.shape[-1] != 2:
        raise ValueError(f"points must have a last dimension of 2 (x, y), got shape {tuple(points.shape)}")
    if not 1 <= k <= gh * gw:
        raise ValueError(f"k must be in [1, {gh * gw}] for a {gh}x{gw} grid, got {k}")
    scale = torch.tensor([gw, gh], dtype=torch.float64)
    centres = patch_centers(grid_size) * scale
    p = points.to(torch.float64)[..., None, :] * scale
    d2 = ((p - centres) ** 2).sum(-1)
    d2 = torch.round(d2 * 1e9) / 1e9  # exact ties despite float rounding, then a stable sort by index
    return torch.sort(d2, dim=-1, stable=True).indices[..., :k]


def boxes_background_mask(boxes: torch.Tensor, grid_size: tuple[int, int]) -> torch.Tensor:
    """`[B, gh * gw]` True for patches whose centre is outside the normalised box `(x, y, w, h)` `[B, 4]`."""
    c = patch_centers(grid_size)[None]  # [1, N, 2]
    b = boxes.to(torch.float64)[:, None]
    inside = ((c[..., 0] >= b[..., 0]) & (c[..., 0] <= b[..., 0] + b[..., 2])
              & (c[..., 1] >= b[..., 1]) & (c[..., 1] <= b[..., 1] + b[..., 3]))
    return ~inside


def part_expert_histogram(expert_maps: torch.Tensor, parts_xy: torch.Tensor, parts_visible: torch.Tensor,
                          num_experts: int, k: int = NEAREST_PATCHES,
                          background: torch.Tensor | None = None) -> torch.Tensor:
    """Counts `[P + 1, E]`: rows are the P parts then background, columns the top-1 expert.

    Args:
        expert_maps: `[B, gh, gw]` top-1 expert of every patch (no CLS token).
        parts_xy: `[B, P, 2]` normalised part locations; `parts_visible`: `[B, P]` bool.
        background: `[B, gh * gw]` bool mask of background patches (e.g. `boxes_background_mask`);
            None counts the patches that are among no visible part's k nearest.
    """
    if expert_maps.dim() != 3:
        raise ValueError(f"expert_maps must be [B, gh, gw], got shape {tuple(expert_maps.shape)}")
    b, gh, gw = expert_maps.shape
    n_parts = parts_xy.shape[1]
    if parts_xy.shape[:2] != parts_visible.shape or parts_xy.shape[0] != b:
        raise ValueError(f"parts_xy {tuple(parts_xy.shape)} and parts_visible {tuple(parts_visible.shape)} "
                         f"must be [B={b}, P, 2] and [B, P]")
    flat = expert_maps.reshape(b, -1).long()
    if flat.numel() and (flat.min() < 0 or flat.max() >= num_experts):
        raise ValueError(f"expert ids must be in [0, {num_experts}), got range [{flat.min()}, {flat.max()}]")
    idx = nearest_patches(parts_xy, (gh, gw), k)  # [B, P, k]
    experts = torch.gather(flat[:, None, :].expand(b, n_parts, -1), 2, idx)  # [B, P, k]
    vis = parts_visible.bool()[..., None].expand_as(experts)
    part_ids = torch.arange(n_parts)[None, :, None].expand_as(experts)
    hist = torch.zeros(n_parts + 1, num_experts, dtype=torch.long)
    hist.index_put_((part_ids[vis], experts[vis]), torch.ones(int(vis.sum()), dtype=torch.long), accumulate=True)
    if background is None:
        matched = torch.zeros(b, gh * gw, dtype=torch.long)
        matched.scatter_add_(1, idx.reshape(b, -1), vis.reshape(b, -1).long())
        background = matched == 0
    if background.shape != flat.shape:
        raise ValueError(f"background mask must be [B, gh*gw] = {tuple(flat.shape)}, got {tuple(background.shape)}")
    hist[n_parts] = torch.bincount(flat[background.bool()], minlength=num_experts)
    return hist


def expert_counts(expert_maps: torch.Tensor, num_experts: int) -> torch.Tensor:
    """`[B, E]`: how many patches of each image went to each expert (top-1)."""
    flat = expert_maps.reshape(expert_maps.shape[0], -1).long()
    counts = torch.zeros(flat.shape[0], num_experts, dtype=torch.long)
    return counts.scatter_add_(1, flat, torch.ones_like(flat))


def attribute_expert_matrix(expert_maps: torch.Tensor, attributes: torch.Tensor, num_experts: int) -> torch.Tensor:
    """SF-MoE Fig. 5: `[A, E]` = sum over images of `attributes[b] (outer) expert_counts[b]`.

    "For an image that corresponds to a set of attributes, we multiply the expert selections with each
    attribute as a cumulative amount of this image." `attributes` is `[B, A]` 0/1 (present or not).
    """
    if attributes.shape[0] != expert_maps.shape[0]:
        raise ValueError(f"attributes has {attributes.shape[0]} rows, expert_maps {expert_maps.shape[0]} images")
    return attributes.double().T @ expert_counts(expert_maps, num_experts).double()


def attribute_expert_correlation(expert_maps: torch.Tensor, attributes: torch.Tensor, num_experts: int) -> torch.Tensor:
    """`[A, E]` Pearson correlation over images between attribute presence and the share of patches per expert
    (an alternative to the cumulative matrix that is not dominated by frequent attributes; 0 where constant)."""
    share = expert_counts(expert_maps, num_experts).double()
    share = share / share.sum(1, keepdim=True).clamp_min(1)
    a = attributes.double() - attributes.double().mean(0)
    s = share - share.mean(0)
    cov = a.T @ s / max(1, a.shape[0])
    denom = a.pow(2).mean(0).sqrt()[:, None] * s.pow(2).mean(0).sqrt()[None, :]
    return torch.where(denom > 0, cov / denom.clamp_min(1e-300), torch.zeros_like(cov))


def attribute_groups(names: list[str]) -> list[tuple[str, int, int]]:
    """Consecutive runs of one category in CUB attribute names `category::value`: `(category, start, stop)`."""
    groups: list[tuple[str, int, int]] = []
    for i, name in enumerate(names):
        cat = name.split("::", 1)[0]
        if groups and groups[-1][0] == cat and groups[-1][2] == i:
            groups[-1] = (cat, groups[-1][1], i + 1)
        else:
            groups.append((cat, i, i + 1))
    return groups


def sum_by_group(matrix: torch.Tensor, groups: list[tuple[str, int, int]]) -> torch.Tensor:
    """`[G, E]`: rows of `matrix` summed within each attribute category."""
    return torch.stack([matrix[a:b].sum(0) for _, a, b in groups])
