"""The adapter banks' fixed-shape dispatch (`dgmoe.moe.adapter_fixed_shape`, CUDA's path for LoRA and
KAdaptation experts) against the sorted dispatch they took before (which reads counts back): in float64,
outputs and the gradients of the tokens, the gates and every adapter weight (the shared PHM rule included), for
each expert kind, top-1 and top-2, with an expert that receives no token, with capacity, in training with
KAdaptation's weight dropout, and through a double backward. `--peft adapter_experts`' bottleneck experts are
GMoE's FFN bank: their CUDA path (`dgmoe.moe.fixed_shape`) is held against the sorted one the same way."""
import pytest
import torch

from dgmoe.moe.adapter_experts import KroneckerExperts, LoRAExperts, PHMRule
from dgmoe.moe.adapter_fixed_shape import adapter_fixed_shape_dispatch, combine_weights
from dgmoe.moe.dispatch import capacity_keep_mask, masked_dispatch, sorted_autograd_dispatch
from dgmoe.moe.experts import Experts
from dgmoe.moe.fixed_shape import fixed_shape_dispatch

KINDS = ("lora", "kadaptation", "bottleneck")
D_IN, D_OUT, TOKENS = 16, 24, 23
#: float64 against float64: two orders of the same sums
EXACT = dict(rtol=1e-10, atol=1e-12)


def _bank(kind: str, dropout: float = 0.0):
    """Four experts of the kind in float64, every weight random (LoRA's B and the bottleneck's up-projection
    start at zero in a model: here they must carry gradients); the rule of KAdaptation experts with them."""
    torch.manual_seed(0)
    if kind == "lora":
        bank = LoRAExperts(D_IN, D_OUT, (1, 2, 4, 3))
    elif kind == "kadaptation":
        bank = KroneckerExperts(D_IN, D_OUT, (1, 2, 4, 8), PHMRule(4), dropout=dropout)
    else:  # `dgmoe.models.peft.adapter_experts`: N bottleneck adapters dim -> bottleneck -> dim
        bank = Experts(4, D_IN, 8)
    bank = bank.double()
    if isinstance(bank, KroneckerExperts):
        bank.rule.double()  # held outside the bank's modules
    with torch.no_grad():
        for p in _weights(bank):
            p.normal_(0, 0.5)
    return bank


def _weights(bank) -> list[torch.nn.Parameter]:
    rule = list(bank.rule.parameters()) if isinstance(bank, KroneckerExperts) else []
    return list(bank.parameters()) + rule


def _routing(k: int, used: int = 3, seed: int = 1):
    """Top-k of the first `used` of 4 experts (expert 3 gets no token unless used = 4)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(used, generator=g)[:k] for _ in range(TOKENS)])
    return idx, torch.rand(TOKENS, k, generator=g, dtype=torch.float64)


def _run(dispatch, bank, x, idx, gates, keep=None, seed=None):
    x, gates = x.clone().requires_grad_(True), gates.clone().requires_grad_(True)
    weights = _weights(bank)
    if seed is not None:
        torch.manual_seed(seed)  # the same dropout draws
    y = dispatch(x, idx, gates, bank, keep)
    upstream = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    grads = torch.autograd.grad((y * upstream).sum(), [x, gates, *weights], allow_unused=True)
    # an expert without tokens: no gradient on the sorted path (never called), zeros on the fixed-shape one
    return [y.detach()] + [torch.zeros_like(t) if g is None else g for g, t in zip(grads, [x, gates, *weights])]


def _cuda_path(kind: str):
    return fixed_shape_dispatch if kind == "bottleneck" else adapter_fixed_shape_dispatch


def _assert_same(got, ref):
    names = ["out", "x", "gates"] + [f"weight {i}" for i in range(len(got) - 3)]
    for name, a, b in zip(names, got, ref):
        torch.testing.assert_close(a, b, **EXACT, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_the_fixed_shape_path_equals_the_sorted_one_with_an_empty_expert(kind, k):
    bank = _bank(kind).eval()
    idx, gates = _routing(k)
    assert 3 not in idx  # the fourth expert receives no token
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64)
    got, ref = _run(_cuda_path(kind), bank, x, idx, gates), _run(sorted_autograd_dispatch, bank, x, idx, gates)
    _assert_same(got, ref)
    _assert_same(got, _run(masked_dispatch, bank, x, idx, gates))
    assert all(g.abs().sum() > 0 for g in got[1:3])  # the check has gradients to compare
    if kind == "lora":  # the unused expert's factors get exactly zero
        assert got[3 + 3].abs().sum() == 0 and got[3 + 4 + 3].abs().sum() == 0


@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_capacity_drops_the_same_assignments(kind):
    bank = _bank(kind).eval()
    idx, gates = _routing(2, used=4)
    keep = capacity_keep_mask(idx, gates, 4, 6)
    assert not keep.all()
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64)
    _assert_same(_run(adapter_fixed_shape_dispatch, bank, x, idx, gates, keep),
                 _run(sorted_autograd_dispatch, bank, x, idx, gates, keep))


@pytest.mark.parametrize("k", [1, 2])
def test_kadaptations_weight_dropout_draws_the_same_masks_when_every_expert_has_tokens(k):
    """In training each expert's H_e gets a dropout mask (MoA's 0.5); both paths form H_e in expert order, so
    with every expert used they draw the same masks from the same seed and agree exactly."""
    bank = _bank("kadaptation", dropout=0.5).train()
    idx, gates = _routing(k, used=4)
    assert set(idx.unique().tolist()) == {0, 1, 2, 3}
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64)
    got = _run(adapter_fixed_shape_dispatch, bank, x, idx, gates, seed=5)
    _assert_same(got, _run(sorted_autograd_dispatch, bank, x, idx, gates, seed=5))
    other = _run(adapter_fixed_shape_dispatch, bank, x, idx, gates, seed=6)[0]
    assert not torch.allclose(got[0], other)  # the masks are live: another seed, another output


@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_the_fixed_shape_path_is_twice_differentiable(kind):
    """Plain autograd: a gradient penalty (IGA's kind of objective) differentiates through it as through
    the sorted loop."""
    bank = _bank(kind).eval()
    idx, gates = _routing(2)
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64)
    results = []
    for dispatch in (adapter_fixed_shape_dispatch, sorted_autograd_dispatch):
        xr = x.clone().requires_grad_(True)
        (grad_x,) = torch.autograd.grad(dispatch(xr, idx, gates, bank).square().sum(), xr, create_graph=True)
        weights = _weights(bank)
        grads = torch.autograd.grad(grad_x.square().sum(), weights, allow_unused=True)
        results.append([torch.zeros_like(w) if g is None else g for g, w in zip(grads, weights)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **EXACT)


def test_combine_weights_hold_each_tokens_kept_gates_and_zeros_elsewhere():
    idx = torch.tensor([[0, 2], [3, 1], [2, 0]])
    gates = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.9, 0.1]])
    keep = torch.tensor([[True, True], [True, False], [True, True]])
    expected = torch.tensor([[0.7, 0.0, 0.3, 0.0], [0.0, 0.0, 0.0, 0.6], [0.1, 0.0, 0.9, 0.0]])
    torch.testing.assert_close(combine_weights(idx, gates, 4, keep), expected)


def test_the_fixed_shape_path_refuses_ffn_experts_in_one_line():
    with pytest.raises(TypeError, match="not Experts; GMoE's FFN experts take dgmoe.moe.fixed_shape"):
        adapter_fixed_shape_dispatch(torch.randn(3, 4), torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1),
                                     Experts(2, 4, 8))


@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_torch_compile_captures_it_whole(kind):
    """fullgraph=True fails on any graph break (a host read, a data-dependent shape)."""
    torch._dynamo.reset()
    bank = _bank(kind).eval()
    idx, gates = _routing(2)
    x = torch.randn(TOKENS, D_IN, dtype=torch.float64)
    compiled = torch.compile(adapter_fixed_shape_dispatch, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, idx, gates, bank), adapter_fixed_shape_dispatch(x, idx, gates, bank),
                               **EXACT)


@pytest.mark.parametrize("kind", ["lora", "kadaptation"])
def test_under_bf16_autocast_it_errs_as_the_sorted_loop_does(kind):
    """The bank's products run in bf16 under autocast on both paths; the output comes back in x's dtype and its
    error against the fp32 result is of the sorted loop's size (each about 0.5% of the largest entry here)."""
    bank = _bank(kind).float().eval()
    idx, gates = _routing(2, used=4)
    x, gates = torch.randn(TOKENS, D_IN), gates.float()
    exact = sorted_autograd_dispatch(x, idx, gates, bank)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fixed, loop = (f(x, idx, gates, bank) for f in (adapter_fixed_shape_dispatch, sorted_autograd_dispatch))
    assert fixed.dtype == loop.dtype == torch.float32
    scale = exact.abs().max()
    assert 0 < (loop - exact).abs().max() / scale < 0.02  # bf16 products: not exact
    assert (fixed - exact).abs().max() <= 2 * (loop - exact).abs().max() + 1e-3 * scale
