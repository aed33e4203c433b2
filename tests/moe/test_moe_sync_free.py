"""The sync-free dispatch (`dgmoe.moe.sync_free`) and what it enables: one compiled graph per block kind
with no recompiles, and training steps that read nothing back from the device (issue: train at the speed of
the GPU). The GPU versions of these checks are in tests/moe/test_moe_sync_free_gpu.py (marked gpu)."""
import pytest
import torch
import torch.nn.functional as F
from host_reads import HostReads

import dgmoe
from dgmoe.algorithms import get_algorithm
from dgmoe.data.base import Batch
from dgmoe.engine.hparams import run_hparams
from dgmoe.models.compiled import compile_blocks
from dgmoe.moe import MoEConfig, MoEMlp, aux_losses, clear_aux
from dgmoe.moe import dispatch as dispatch_module
from dgmoe.moe.dispatch import sorted_autograd_dispatch
from dgmoe.moe.sync_free import sync_free_dispatch

pytestmark = pytest.mark.skipif(not hasattr(F, "grouped_mm") and not hasattr(torch, "_grouped_mm"),
                                reason="torch has no grouped_mm (torch < 2.8)")
BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


def _run(layer, dispatch, x, seed=5):
    layer.dispatch_override = dispatch
    for p in layer.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)
    with torch.autocast(**BF16):
        y = layer(x)
    (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("kw", [{}, dict(capacity_factor=1.0), dict(top_k=1, num_experts=8)])
def test_sync_free_dispatch_under_bf16_autocast_matches_the_autograd_path(kw):
    torch.manual_seed(1)
    layer = MoEMlp(8, 32, MoEConfig(**kw)).train()
    with torch.no_grad():
        layer.experts.fc1_bias.normal_(), layer.experts.fc2_bias.normal_()
    x = torch.randn(4, 9, 8)
    y, gx, grads = _run(layer, sync_free_dispatch, x)
    y_ref, gx_ref, g_ref = _run(layer, sorted_autograd_dispatch, x)
    assert y.dtype == y_ref.dtype == torch.float32 and gx.dtype == torch.float32
    torch.testing.assert_close(y, y_ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gx, gx_ref, rtol=2e-2, atol=2e-2)
    for name, g in g_ref.items():
        assert grads[name].dtype == torch.float32
        torch.testing.assert_close(grads[name], g, rtol=5e-2, atol=5e-2, msg=name)


def test_the_sync_free_backward_gathers_and_never_scatters():
    """Every row movement of the backward is a gather by a permutation: no `index_add` or `scatter_add`
    (atomic adds on a GPU, nondeterministic where indices repeat)."""
    from dgmoe.bench.layer import ComputingOperations

    torch.manual_seed(0)
    layer = MoEMlp(8, 32, MoEConfig(num_experts=4, top_k=2)).train()
    layer.dispatch_override = sync_free_dispatch
    x = torch.randn(3, 5, 8, requires_grad=True)
    with torch.autocast(**BF16):
        y = layer(x)
    with ComputingOperations() as ops:
        y.float().sum().backward()
    names = set(ops.counts)
    assert "index_select" in names and not {"index_add", "index_add_", "scatter_add", "scatter_add_"} & names


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_the_experts_keep_no_rows_or_activations_for_the_backward_unless_dropout_needs_its_mask(dropout):
    """Without expert dropout the experts' FFN is recomputed in the backward from the layer's input: no
    [T*k, d] gathered rows and no [T*k, hidden] activation is kept (the activation memory of the issue's GPU
    target); with dropout they are, as its mask must be. The gradients are the mask loop's either way
    (tests/moe/test_moe_dispatch.py, and the bf16 comparison above)."""
    torch.manual_seed(0)
    layer = MoEMlp(16, 64, MoEConfig(num_experts=4, top_k=2, expert_dropout=dropout)).train()
    layer.dispatch_override = sync_free_dispatch
    x = torch.randn(2, 10, 16, requires_grad=True)
    kept: dict[tuple, set] = {(40, 64): set(), (40, 16): set()}  # T*k = 40 assignments: activations, rows

    def pack(t):
        if tuple(t.shape) in kept:
            kept[tuple(t.shape)].add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    if dropout == 0:
        assert not kept[(40, 64)] and not kept[(40, 16)], {s: len(p) for s, p in kept.items()}
    else:
        assert len(kept[(40, 64)]) >= 2 and kept[(40, 16)]
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def _micro(name):
    torch.manual_seed(0)
    if name.startswith("gmoe_micro"):
        return dgmoe.create_model(name, num_classes=5, depth=4)
    layout = {"moe_layers": "[S,F]x2"} if name.startswith("sfmoe") else {}
    return dgmoe.create_model(name, num_classes=5, img_size=16, patch_size=4, embed_dim=32, depth=4, num_heads=2,
                              **layout)


def _images(model, b=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    size = model.patch_embed.img_size
    size = size[0] if isinstance(size, tuple) else size
    x = torch.randn(b, 3, size, size, generator=g)
    meta = {"lat": torch.rand(b, generator=g) * 160 - 80, "lon": torch.rand(b, generator=g) * 340 - 170}
    return x, torch.randint(5, (b,), generator=g), meta


def test_a_gmoe_compiles_into_one_graph_per_block_kind_without_recompiles():
    """fullgraph=True fails on any graph break (a host read, an untraceable call); the number of graphs
    must not grow after the first update (no recompiles), also with two forwards in one update."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _micro("gmoe_micro_patch7_28").train()
    eager = _micro("gmoe_micro_patch7_28").train()
    compile_blocks(model, backend="aot_eager", fullgraph=True)
    x, _, _ = _images(model)
    graphs = []
    for step in range(4):
        for net in (model, eager):
            clear_aux(net)
            torch.manual_seed(step)
            with torch.autocast(**BF16):
                out = net(x)
                if step == 2:  # an algorithm with two forwards in one update (aux terms averaged)
                    out = out + net(x)
            loss = out.float().square().mean() + sum(aux_losses(net).values())
            loss.backward()
            if net is model:
                compiled_loss = loss.detach()
        torch.testing.assert_close(compiled_loss, loss.detach(), rtol=1e-2, atol=1e-3)
        graphs.append(counters["stats"]["unique_graphs"])
    # the patch embedding, the dense block and the sparse block (shared by both sparse blocks); a second
    # forward in one update adds the sparse block's variant that adds to the auxiliary sums, once
    assert graphs[0] == graphs[1] == 3, f"graphs after each update: {graphs}"
    assert graphs[2] == graphs[3] == 4, f"graphs after each update: {graphs}"


@pytest.mark.parametrize("model_name, algorithm", [("gmoe_micro_patch7_28", "ERM"), ("sfmoe_small_patch16_224", "ERM"),
                                                   ("moge_tiny_patch16_224", "MoGE")])
def test_a_training_step_reads_nothing_back_from_the_device(monkeypatch, model_name, algorithm):
    """With the dispatch a GPU runs (the fused grouped GEMM, forced here on the CPU), a whole update (forward,
    auxiliary losses, backward, optimiser step, metrics) makes no host read: on CUDA, no synchronisation."""
    monkeypatch.setattr(dispatch_module, "fused_grouped_gemm", lambda device, dtype: dtype == torch.bfloat16)
    model = _micro(model_name)
    hparams = run_hparams(algorithm, "RotatedMNIST", model_name, 0, 0)
    alg = get_algorithm(algorithm)(model, 5, 2, hparams)
    x, y, meta = _images(model)
    batches = [Batch(x[:3], y[:3], {k: v[:3] for k, v in meta.items()}),
               Batch(x[3:], y[3:], {k: v[3:] for k, v in meta.items()})]
    with torch.autocast(**BF16):
        alg.update(batches, 0)  # first update: optimiser state is created
        with HostReads() as spy:
            metrics = alg.update(batches, 1)
    # the metadata checks read CPU tensors on the CPU only (on a GPU: device-side asserts, `any_bad`)
    reads = [call for call in spy.calls if not call[1].rsplit(":", 1)[0].endswith("dgmoe/data/geo/metadata.py")]
    assert reads == [], reads
    assert all(isinstance(v, torch.Tensor) for v in metrics.values()), metrics


def test_evaluation_runs_a_compiled_network_eagerly_and_compiles_nothing_new():
    """`--compile` is for the training step: evaluation (eval mode, no grad, a shorter last batch per split)
    would otherwise compile a graph per variant and hit dynamo's recompile limit (seen on a GPU)."""
    from torch._dynamo.utils import counters

    from dgmoe.engine.evaluate import _predict_parts

    torch._dynamo.reset()
    counters.clear()
    model = _micro("gmoe_micro_patch7_28").train()
    compile_blocks(model, backend="eager")
    x, y, _ = _images(model)
    with torch.autocast(**BF16):
        model(x).float().sum().backward()
    trained = counters["stats"]["unique_graphs"]
    assert trained > 0
    model.eval()
    batches = [(part, Batch(x[:n], y[:n])) for part, n in ((0, 6), (0, 3), (1, 5), (1, 1))]
    accs, _, _ = _predict_parts(lambda images, meta: model(images), iter(batches), 2, "cpu", {})
    assert counters["stats"]["unique_graphs"] == trained and all(0 <= a <= 1 for a in accs)


def test_every_block_compiles_when_stochastic_depth_gives_each_its_own_rate():
    """Drop-path rates differ per block (a float dynamo specialises on: a graph per block). Past dynamo's
    recompile limit (8) the remaining blocks would run eagerly; `compile_blocks` raises it to cover them."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = dgmoe.create_model("gmoe_micro_patch7_28", num_classes=5, depth=12, drop_path_rate=0.1).train()
    compile_blocks(model, backend="eager")
    x, _, _ = _images(model)
    with torch.autocast(**BF16):  # as on a GPU: the sparse blocks compile whole
        model(x).float().sum().backward()
    # the patch embedding, and one graph per block: twelve drop-path rates (the first block's is 0: Identity)
    assert counters["stats"]["unique_graphs"] == 1 + 12
