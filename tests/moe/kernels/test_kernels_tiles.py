"""The experts' tiles (`dgmoe.moe.kernels.tiles`): on a GPU `triton.autotune` times a small set that holds
ScatterMoE's main tile and smaller tiles for small T, keyed on the shape (T*k rows, d, hidden); under the
interpreter the set is one config, so nothing is timed and the tests run one tile; both launch modes give the
same experts."""
import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]'): no kernels to test")
from dgmoe.moe.experts import Experts  # noqa: E402
from dgmoe.moe.kernels import expert_dispatch, tiles  # noqa: E402


def test_the_gpu_set_holds_scattermoes_tile_and_small_tiles_for_small_t():
    gpu = tiles.tile_set(interpreting=False)
    assert (128, 128, 32, 4, 4) in gpu  # BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps
    assert {(32, 32, 32), (64, 64, 32)} <= {tile[:3] for tile in gpu}
    assert len(set(gpu)) == len(gpu) <= 6


def test_under_the_interpreter_one_config_runs_keyed_on_the_shape():
    assert tiles.INTERPRETING
    for tuned in (tiles.grouped_rows_tuned, tiles.grouped_weight_grad_tuned):
        assert len(tuned.configs) == 1
    assert tiles.grouped_rows_tuned.configs[0].kwargs == dict(zip(("BM", "BN", "BK"), tiles.INTERPRETER_TILE))
    assert {"num_rows", "K", "cols_out"} <= set(tiles.grouped_rows_tuned.keys)
    assert {"num_rows", "P", "Q"} <= set(tiles.grouped_weight_grad_tuned.keys)


def test_autotuned_and_fixed_launches_compute_the_same_experts():
    torch.manual_seed(0)
    experts = Experts(3, 16, 32)
    x = torch.randn(21, 16, requires_grad=True)
    idx, gates = torch.randint(0, 3, (21, 2)), torch.rand(21, 2)
    results = []
    for mode in tiles.TILES:
        x.grad = None
        experts.zero_grad(set_to_none=True)
        y = expert_dispatch(x, idx, gates, experts, tiles=mode)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append([y.detach(), x.grad, *(p.grad for p in experts.parameters())])
    for autotuned, fixed in zip(*results, strict=True):
        torch.testing.assert_close(autotuned, fixed, rtol=0, atol=0)


def test_an_unknown_tile_mode_is_refused():
    experts = Experts(2, 16, 16)
    with pytest.raises(ValueError, match="tiles must be one of"):
        expert_dispatch(torch.randn(4, 16), torch.zeros(4, 1, dtype=torch.long), torch.ones(4, 1), experts,
                        tiles="large")
