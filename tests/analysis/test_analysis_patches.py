"""Patch/part matching and expert histograms on hand-made cases (GMoE §5.4 Fig. 3b, SF-MoE Fig. 5)."""
import pytest
import torch

from dgmoe.analysis.patches import (
    attribute_expert_correlation,
    attribute_expert_matrix,
    attribute_groups,
    boxes_background_mask,
    expert_counts,
    nearest_patches,
    part_expert_histogram,
    patch_centers,
    sum_by_group,
)


def test_patch_centers_row_major():
    c = patch_centers((2, 3))
    expected = torch.tensor([[1 / 6, 0.25], [0.5, 0.25], [5 / 6, 0.25], [1 / 6, 0.75], [0.5, 0.75], [5 / 6, 0.75]],
                            dtype=torch.float64)
    assert torch.allclose(c, expected)


def test_point_at_patch_centre_gets_its_3x3_block():
    # centre of patch (row 1, col 1) of a 4x4 grid
    idx = nearest_patches(torch.tensor([[1.5 / 4, 1.5 / 4]]), (4, 4))
    assert sorted(idx[0].tolist()) == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert idx[0, 0].item() == 5  # the patch containing the point comes first


def test_corner_point_order_and_tie_break():
    # distances^2 in patch units from (0, 0): p0 .5, p1/p4 2.5, p5 4.5, p2/p8 6.5, p6/p9 8.5, then p3/p10/p12 12.5
    idx = nearest_patches(torch.tensor([[0.0, 0.0]]), (4, 4))
    assert idx[0].tolist() == [0, 1, 4, 5, 2, 8, 6, 9, 3]


def test_non_square_grid_uses_patch_units():
    # 2 rows x 4 cols; a point in the middle of the right half, on the row boundary
    idx = nearest_patches(torch.tensor([[0.75, 0.5]]), (2, 4), k=4)
    assert sorted(idx[0].tolist()) == [2, 3, 6, 7]


def test_nearest_patches_rejects_bad_k_and_shape():
    with pytest.raises(ValueError, match="k must be"):
        nearest_patches(torch.zeros(1, 2), (2, 2), k=5)
    with pytest.raises(ValueError, match="last dimension of 2"):
        nearest_patches(torch.zeros(1, 3), (2, 2))


EMAP = torch.tensor([[[0, 1, 2], [3, 4, 5], [0, 1, 2]]])  # one image, 3x3 grid, 6 experts


def test_histogram_one_central_part_covers_all_nine_patches():
    parts = torch.tensor([[[0.5, 0.5], [0.1, 0.1]]])
    visible = torch.tensor([[True, False]])
    hist = part_expert_histogram(EMAP, parts, visible, num_experts=6)
    assert hist.shape == (3, 6)
    assert hist[0].tolist() == [2, 2, 2, 1, 1, 1]
    assert hist[1].tolist() == [0] * 6          # invisible part counts nothing
    assert hist[2].tolist() == [0] * 6          # every patch is matched: no background
    assert hist.sum().item() == 9


def test_histogram_k1_and_unmatched_background():
    parts = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]])  # centre -> e4 ; top-right patch -> e2
    visible = torch.tensor([[True, True]])
    hist = part_expert_histogram(EMAP, parts, visible, num_experts=6, k=1)
    assert hist[0].tolist() == [0, 0, 0, 0, 1, 0]
    assert hist[1].tolist() == [0, 0, 1, 0, 0, 0]
    # background: the 7 other patches -> experts 0,1,3,5,0,1,2
    assert hist[2].tolist() == [2, 2, 1, 1, 0, 1]


def test_histogram_box_background_and_batch_accumulation():
    maps = torch.stack([EMAP[0], torch.full((3, 3), 5)])
    parts = torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]])
    visible = torch.tensor([[True], [True]])
    boxes = torch.tensor([[0.0, 0.0, 1.0, 0.4], [0.0, 0.0, 1.0, 1.0]])  # image 0: top row inside; image 1: all
    bg = boxes_background_mask(boxes, (3, 3))
    assert bg[0].tolist() == [False] * 3 + [True] * 6 and not bg[1].any()
    hist = part_expert_histogram(maps, parts, visible, num_experts=6, background=bg)
    assert hist[0].tolist() == [2, 2, 2, 1, 1, 1 + 9]
    assert hist[1].tolist() == [1, 1, 1, 1, 1, 1]  # rows 2-3 of image 0: experts 3,4,5,0,1,2


def test_histogram_validates_inputs():
    with pytest.raises(ValueError, match="expert ids"):
        part_expert_histogram(EMAP, torch.zeros(1, 1, 2), torch.ones(1, 1, dtype=torch.bool), num_experts=4)
    with pytest.raises(ValueError, match="gh, gw"):
        part_expert_histogram(EMAP[0], torch.zeros(1, 1, 2), torch.ones(1, 1, dtype=torch.bool), num_experts=6)


def test_attribute_matrix_is_cumulative_outer_product():
    maps = torch.tensor([[[0, 0], [1, 2]], [[2, 2], [2, 2]]])  # counts: [2,1,1] and [0,0,4]
    assert expert_counts(maps, 3).tolist() == [[2, 1, 1], [0, 0, 4]]
    attrs = torch.tensor([[1, 0, 1], [1, 1, 0]])
    m = attribute_expert_matrix(maps, attrs, 3)
    assert m.tolist() == [[2, 1, 5], [0, 0, 4], [2, 1, 1]]


def test_attribute_correlation_signs():
    maps = torch.tensor([[[0, 0], [0, 0]], [[1, 1], [1, 1]], [[0, 0], [0, 1]], [[1, 1], [1, 0]]])
    attrs = torch.tensor([[1, 1], [0, 1], [1, 1], [0, 1]])  # attr 0 follows expert 0, attr 1 is constant
    c = attribute_expert_correlation(maps, attrs, 2)
    assert c[0, 0] > 0.9 and c[0, 1] < -0.9
    assert c[1].tolist() == [0.0, 0.0]


def test_attribute_groups_and_sums():
    names = ["has_bill_shape::dagger", "has_bill_shape::hooked", "has_wing_color::blue", "has_size::small"]
    groups = attribute_groups(names)
    assert groups == [("has_bill_shape", 0, 2), ("has_wing_color", 2, 3), ("has_size", 3, 4)]
    summed = sum_by_group(torch.tensor([[1.0, 0], [2, 1], [0, 5], [3, 3]]), groups)
    assert summed.tolist() == [[3, 1], [0, 5], [3, 3]]
