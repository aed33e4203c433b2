"""The Triton experts and the fused router are custom operators that torch.compile captures: a compiled call of
a sparse layer forced through the Triton path, and of the fused router, traces into one graph (fullgraph=True:
a graph break would raise) whose nodes include the operators forward and backward, and it matches the eager call
(outputs and every gradient), under Triton's interpreter. The chooser's compiled path is the captured function,
not an eager call between graphs."""
import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'dgmoe[triton]'): no kernels to test")
from functorch.compile import make_boxed_func  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from dgmoe.moe import MoEConfig, MoEMlp  # noqa: E402
from dgmoe.moe import dispatch as dispatch_module  # noqa: E402
from dgmoe.moe.dispatch import triton_dispatch  # noqa: E402
from dgmoe.moe.kernels import fused_route  # noqa: E402


class GraphRecorder:
    """A torch.compile backend that records the targets of every forward and backward graph, then runs them as
    traced (AOTAutograd, no code generation)."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.backend = aot_autograd(fw_compiler=self._record, bw_compiler=self._record)

    def _record(self, graph_module, example_inputs):
        self.targets += [str(node.target) for node in graph_module.graph.nodes if node.op == "call_function"]
        return make_boxed_func(graph_module.forward)


def _layer_step(layer, x, forward):
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = forward(x)
    loss = (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum() + sum(layer.aux_losses().values())
    layer.clear_aux()
    loss.backward()
    return [y.detach(), x.grad] + [p.grad for p in layer.parameters()]


@pytest.mark.parametrize("activation", ["gelu", "quick_gelu"])
def test_a_compiled_layer_through_the_triton_experts_is_one_graph_and_matches_eager(activation):
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = MoEMlp(8, 24, MoEConfig(num_experts=4, top_k=2, noise_std=0.0), activation=activation,
                   dispatch_override=triton_dispatch).train()
    x = torch.randn(2, 5, 8)
    eager = _layer_step(layer, x, layer)
    recorder = GraphRecorder()
    compiled = _layer_step(layer, x, torch.compile(layer, backend=recorder.backend, fullgraph=True))
    assert "dgmoe.triton_experts.default" in recorder.targets
    assert "dgmoe.triton_experts_backward.default" in recorder.targets
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_compiled_fused_router_is_one_graph_and_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    logits, noise = torch.randn(20, 6), torch.randn(20, 6)

    def step(route):
        source = logits.clone().requires_grad_(True)
        r = route(source)
        weights = torch.arange(r.gates.numel(), dtype=torch.float32).view_as(r.gates)
        ((r.gates * weights).sum() + r.balance_loss() + (r.probs ** 2).sum()).backward()
        return [r.gates.detach(), r.probs.detach(), r.expert_idx, source.grad]

    def route(source):
        return fused_route(source, 2, noise, 1.0)

    eager = step(route)
    recorder = GraphRecorder()
    compiled = step(torch.compile(route, backend=recorder.backend, fullgraph=True))
    assert "dgmoe.fused_route.default" in recorder.targets
    assert "dgmoe.fused_route_backward.default" in recorder.targets
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_under_compile_the_chosen_triton_path_is_traced_not_run_between_graphs():
    dispatch_module.prepare_uncompiled()
    assert "triton" in dispatch_module.CAPTURED
    assert dispatch_module.path_function("triton", compiling=True) is dispatch_module.PATHS["triton"]
