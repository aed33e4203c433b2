"""On a CUDA device (marked gpu; run with `-m gpu`): the sync-free dispatch equals the mask loop, and a
whole training update of GMoE, SF-MoE and MoGE (forward, auxiliary losses, backward, Adam, metrics) runs
under `torch.cuda.set_sync_debug_mode("error")`, which raises on any host synchronisation. The CPU
versions (the same checks by construction) are in tests/moe/test_moe_sync_free.py."""
import pytest
import torch

import dgmoe
from dgmoe.algorithms import get_algorithm
from dgmoe.data.base import Batch
from dgmoe.engine.hparams import run_hparams
from dgmoe.moe import MoEConfig, MoEMlp
from dgmoe.moe.dispatch import masked_dispatch
from dgmoe.moe.sync_free import fast_grouped_gemm, sync_free_dispatch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _fused() -> bool:
    return fast_grouped_gemm(torch.device("cuda"), torch.bfloat16)


@pytest.mark.parametrize("activation", ["gelu", "quick_gelu"])
def test_sync_free_dispatch_matches_the_mask_loop_on_cuda_in_bf16(activation):
    if not _fused():
        pytest.skip("torch's grouped GEMM is fused on compute capability 9.0+ only")
    torch.manual_seed(0)
    layer = MoEMlp(64, 256, MoEConfig(num_experts=6, top_k=2), activation=activation).cuda().train()
    x = torch.randn(4, 50, 64, device="cuda")
    outs = {}
    for name, dispatch in (("sync_free", sync_free_dispatch), ("mask", masked_dispatch)):
        layer.dispatch_override = dispatch
        torch.manual_seed(1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs[name] = layer(x).float()
    torch.testing.assert_close(outs["sync_free"], outs["mask"], rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("model_name, algorithm, kwargs", [
    ("gmoe_tiny_patch16_224", "ERM", {}),
    ("sfmoe_small_patch16_224", "ERM", {"embed_dim": 192, "num_heads": 3}),
    ("moge_tiny_patch16_224", "MoGE", {}),
    ("gmoe_base_patch16_clip_quickgelu_224", "ERM", {"embed_dim": 192, "num_heads": 3, "depth": 4, "proj_dim": 64}),
    ("gmoe_small_patch14_reg4_dinov2", "ERM", {"patch_size": 16, "depth": 4}),
])
def test_a_training_update_makes_no_host_synchronisation(model_name, algorithm, kwargs):
    if not _fused():
        pytest.skip("the sync-free dispatch runs where torch's grouped GEMM is fused (compute capability 9.0+)")
    torch.manual_seed(0)
    model = dgmoe.create_model(model_name, num_classes=7, img_size=64, **kwargs).cuda()
    alg = get_algorithm(algorithm)(model, 7, 3, run_hparams(algorithm, "PACS", model_name, 0, 0))
    g = torch.Generator().manual_seed(0)
    batches = [Batch(torch.randn(8, 3, 64, 64, generator=g).cuda(), torch.randint(7, (8,), generator=g).cuda(),
                     {"lat": (torch.rand(8, generator=g) * 160 - 80).cuda(),
                      "lon": (torch.rand(8, generator=g) * 340 - 170).cuda()}) for _ in range(3)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        alg.update(batches, 0)  # creates Adam's state
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            metrics = alg.update(batches, 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values())


def test_the_step_loop_with_its_background_loader_makes_no_host_synchronisation():
    """The trainer's loop body on a GPU: the next step's batches (uint8 gathered, pinned, copied and augmented on
    the device in the loader's thread), the update, the metric sums and the non-finite watch."""
    if not _fused():
        pytest.skip("the sync-free dispatch runs where torch's grouped GEMM is fused (compute capability 9.0+)")
    import numpy as np

    from dgmoe.data import ArrayDomain, TrainBatches, train_transform
    from dgmoe.engine.finite import FiniteWatch
    from dgmoe.engine.step_metrics import StepMetrics

    rng = np.random.default_rng(0)
    envs = [ArrayDomain(rng.integers(0, 255, (20, 3, 64, 64), dtype=np.uint8), rng.integers(0, 7, 20))
            for _ in range(3)]
    batches = TrainBatches(envs, [np.arange(20)] * 3, 8, 0, train_transform(64), device="cuda")
    torch.manual_seed(0)
    model = dgmoe.create_model("gmoe_tiny_patch16_224", num_classes=7, img_size=64).cuda()
    alg = get_algorithm("ERM")(model, 7, 3, run_hparams("ERM", "PACS", "gmoe_tiny_patch16_224", 0, 0))
    sums, watch = StepMetrics(), FiniteWatch()
    stream = batches.iter_from(0, 6, pin_memory=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        alg.update([b.to("cuda") for b in next(stream)], 0)  # creates Adam's state
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for step, minibatches in zip(range(1, 6), stream):
                metrics = alg.update([b.to("cuda") for b in minibatches], step)
                watch.observe(step, metrics)
                sums.add(metrics)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            stream.close()
    assert watch.first_nonfinite() is None and all(np.isfinite(v) for v in sums.means().values())
