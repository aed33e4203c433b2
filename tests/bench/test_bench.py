"""Benchmark plumbing: statistics, fresh-process runs, warnings, and the commands end to end on tiny shapes.
Timings are never asserted; only that every candidate is measured, memory is accounted, and warnings follow
from injected timings or from the problem's size (never from this machine's speed)."""
import re
import sys

import pytest
import torch
from click.testing import CliRunner

from dgmoe.bench.layer import (
    COMPILED_CANDIDATES,
    LIMIT,
    LayerBenchConfig,
    available_candidates,
    bench_moe_layer,
    limit_flops,
    tutel_style_dispatch,
)
from dgmoe.bench.moa import MOA_CANDIDATES, dense_then_mask_dispatch, moa_layer
from dgmoe.bench.timing import (
    MIN_ROUNDS,
    Spread,
    check_rounds,
    interleaved_times,
    run_in_fresh_process,
    size_warning,
    summarize_repeats,
    timing_warnings,
)
from dgmoe.cli import main, run
from dgmoe.moe import MoEConfig, MoEMlp
from dgmoe.moe.dispatch import capacity_keep_mask, expert_capacity, sorted_dispatch


def test_summarize_repeats_reports_median_min_max():
    runs = [{"a": {"ratio": r}} for r in (1.2, 1.0, 1.1)]
    assert summarize_repeats(runs, "ratio") == {"a": {"median": 1.1, "min": 1.0, "max": 1.2}}


def test_spread_is_the_interquartile_range_of_the_rounds():
    s = Spread.of([5.0, 1.0, 2.0, 4.0, 3.0])
    assert (s.median, s.q1, s.q3, s.low, s.high, s.n) == (3.0, 2.0, 4.0, 1.0, 5.0, 5)
    assert s.text() == "2.000-4.000" and s.relative == pytest.approx(2 / 3)


def test_too_few_rounds_or_no_warmup_are_refused():
    with pytest.raises(ValueError, match=f"at least {MIN_ROUNDS} timed rounds"):
        check_rounds(MIN_ROUNDS - 1)
    with pytest.raises(ValueError, match="warm-up"):
        interleaved_times({"a": lambda: None}, rounds=MIN_ROUNDS, warmup=0)
    assert len(interleaved_times({"a": lambda: None}, rounds=MIN_ROUNDS)["a"]) == MIN_ROUNDS


def test_timing_warnings_from_injected_timings():
    steady = [0.100, 0.101, 0.099, 0.100, 0.102]
    assert timing_warnings("a", [1.0, 1.01, 0.99, 1.0, 1.02], steady, steady) == []
    (noisy,) = timing_warnings("a", [0.5, 1.0, 1.5, 1.0, 2.0], steady, steady[::-1])
    assert noisy.startswith("a: the ratio varies between rounds (IQR 1.000-1.500")
    # `bench layer --tokens 512 --dim 64` printed a ratio of 0.405 with seconds 3.5x the limit's
    messages = timing_warnings("moe", [0.40, 0.41, 0.40, 0.41, 0.405], [0.35] * 5, [0.1] * 5)
    assert any("median per-round ratio (0.405) and the ratio of median seconds (3.500) disagree" in m for m in messages)
    (short,) = timing_warnings("b", [1.0] * 5, [1e-3] * 5, [1e-3] * 5)
    assert "a call takes 1.00 ms (< 5 ms)" in short
    # on a GPU a round is 10 back-to-back calls: 1 ms calls make a 10 ms round, long enough to time
    assert timing_warnings("b", [1.0] * 5, [1e-3] * 5, [1e-3] * 5, calls=10) == []
    (short,) = timing_warnings("b", [1.0] * 5, [1e-4] * 5, [1e-4] * 5, calls=10)
    assert "a round of 10 calls takes 1.00 ms (< 5 ms)" in short


def test_size_warning_depends_on_the_problem_only():
    tiny, default = LayerBenchConfig(tokens=512, dim=64), LayerBenchConfig()
    assert limit_flops(tiny) == pytest.approx(0.201e9, rel=0.01) and limit_flops(default) > 80e9
    (warning,) = size_warning("the limit", limit_flops(tiny))
    assert "0.201 GFLOP per call (< 1 GFLOP): too small a problem to time reliably" in warning
    assert size_warning("the limit", limit_flops(default)) == []


def test_fresh_process_failure_names_the_module_and_shows_its_error():
    with pytest.raises(RuntimeError, match="dgmoe.bench.layer.*failed"):
        run_in_fresh_process("dgmoe.bench.layer", {"cfg": {"no_such_field": 1}, "candidate": "router alone"})


def test_tutel_style_fixed_slots_equal_the_grouped_capacity_dispatch():
    torch.manual_seed(0)
    layer = MoEMlp(8, 16, MoEConfig(num_experts=4, top_k=2)).eval()
    x = torch.randn(30, 8)
    routing = layer.router.route(x)
    slots = expert_capacity(30, 4, 2, 0.5)
    keep = capacity_keep_mask(routing.expert_idx, routing.gates, 4, slots)
    assert not keep.all()  # some tokens are dropped at this capacity
    fixed = tutel_style_dispatch(MoEConfig(num_experts=4, top_k=2, capacity_factor=0.5))(
        x, routing.expert_idx, routing.gates, layer.experts, keep)
    torch.testing.assert_close(fixed, sorted_dispatch(x, routing.expert_idx, routing.gates, layer.experts, keep))


@pytest.mark.parametrize("candidate", available_candidates())
def test_every_layer_candidate_is_timed_against_the_limit(candidate):
    cfg = LayerBenchConfig(tokens=64, dim=16, experts=4, rounds=MIN_ROUNDS)
    result = bench_moe_layer(cfg, candidate)
    assert set(result) == {LIMIT, candidate}
    assert result[LIMIT]["ratio"] == 1.0 and result[candidate]["seconds"] > 0
    assert len(result[candidate]["ratios"]) == len(result[candidate]["times"]) == MIN_ROUNDS
    # two dense FFNs forward and backward are a dozen operations; every MoE path has more (its router, or at
    # least the gather and combine around its experts); the compiled layer is not counted
    assert 6 <= result[LIMIT]["operations"] <= 20
    if candidate in COMPILED_CANDIDATES:
        assert result[candidate]["operations"] is None
    else:
        assert result[candidate]["operations"] > 2 * result[LIMIT]["operations"]


@pytest.mark.slow  # ~15 s: CI runs it with -m slow
def test_bench_layer_command_runs_each_path_in_fresh_processes_and_rejects_unknown_paths():
    args = ["bench", "layer", "--tokens", "64", "--dim", "16", "--experts", "4", "--rounds", "5", "--repeats", "2"]
    result = CliRunner().invoke(main, [*args, "--paths", "moe grouped (default),router alone"])
    assert result.exit_code == 0, result.output
    for path in (LIMIT, "moe grouped (default)", "router alone"):
        assert f"| {path} " in result.output
    assert "2 fresh processes per path x 5 rounds" in result.output and "IQR over rounds" in result.output
    assert "operations per call" in result.output
    # a deliberately tiny problem: warned about whatever the timings are
    assert re.search(r"WARNING: the limit at T=64, d=16, k=2 does 0.00157 GFLOP per call \(< 1 GFLOP\)", result.output)
    bad = CliRunner().invoke(main, [*args, "--paths", "moe grouped"])
    assert bad.exit_code != 0 and "moe grouped (default)" in bad.output
    few = CliRunner().invoke(main, [*args[:-4], "--rounds", "2"])
    assert few.exit_code != 0 and "--rounds" in few.output


def test_bench_memory_counts_the_extra_experts_weights_and_optimiser_state():
    result = CliRunner().invoke(main, ["bench", "memory", "--models", "vit_micro_patch7_28,gmoe_micro_patch7_28",
                                       "--batch-sizes", "256", "--img-size", "28"])
    assert result.exit_code == 0, result.output
    rows = [line.split("|") for line in result.output.splitlines() if line.startswith("|") and "_micro_" in line]
    (vit_total, vit_states), (moe_total, moe_states) = [(float(r[3]), float(r[4])) for r in rows]
    assert 0 < vit_states < vit_total and 0 < moe_states < moe_total
    assert moe_states > vit_states and moe_total > vit_total


def test_bench_memory_rejects_a_malformed_batch_list():
    result = CliRunner().invoke(main, ["bench", "memory", "--batch-sizes", "16,x"])
    assert result.exit_code != 0 and "--batch-sizes" in result.output


@pytest.mark.slow  # ~15 s: CI runs it with -m slow
def test_bench_models_command_reports_time_floor_and_memory_for_each_model():
    result = CliRunner().invoke(main, ["bench", "models", "--models", "vit_micro_patch7_28,gmoe_micro_patch7_28",
                                       "--img-size", "28", "--batch-size", "2", "--rounds", "5"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("| model"))
    for column in ("train vs compute floor", "floor min", "train IQR", "inference vs ref", "inference IQR",
                   "peak mem (GB)", "mem vs ref"):
        assert column in header
    assert sum(line.startswith(("| vit_micro", "| gmoe_micro")) for line in result.output.splitlines()) == 2
    assert "WARNING: a train step of vit_micro_patch7_28 (batch 2 at 28 px) does" in result.output
    few = CliRunner().invoke(main, ["bench", "models", "--rounds", "2"])
    assert few.exit_code != 0 and "--rounds" in few.output


@pytest.mark.slow
def test_compiled_gmoe_equals_eager_in_eval_and_trains():
    """torch.compile (inductor; needs a C compiler on CPU) compiles around the dispatch, which runs eagerly."""
    import torch.nn.functional as F

    from dgmoe.models import create_model

    torch.manual_seed(0)
    model = create_model("gmoe_micro_patch7_28", num_classes=10).eval()
    x = torch.randn(8, 3, 28, 28)
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    compiled.train()
    F.cross_entropy(compiled(x), torch.arange(8)).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


def test_bench_stem_command_checks_and_times_the_stem_against_timms():
    pytest.importorskip("timm")  # the timm extra (the peers' copy: PYTHONPATH=/work/peers)
    result = CliRunner().invoke(main, ["bench", "stem", "--img-size", "32", "--batch-size", "1", "--rounds", "5"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "| timm " in line]
    assert len(rows) == 2 and rows[0].startswith("| inference") and rows[1].startswith("| forward+backward")
    assert "IQR over rounds" in result.output
    assert "WARNING: the stem's inference pass (batch 1 at 32 px) does" in result.output


def test_bench_stem_without_timm_says_which_extra_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    assert run(["bench", "stem", "--img-size", "32", "--batch-size", "1", "--rounds", "5"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "pip install 'dgmoe[timm]'" in err and "Traceback" not in err


def test_back_to_back_calls_are_timed_between_two_syncs():
    events = []
    candidates = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    times = interleaved_times(candidates, rounds=MIN_ROUNDS, warmup=1, calls=3, sync=lambda: events.append("sync"))
    assert all(len(t) == MIN_ROUNDS for t in times.values())
    timed = events[events.index("sync") + 1:]  # after the warm-up round and its sync
    rounds = "".join("|" if e == "sync" else e for e in timed).split("|")
    assert sorted(r for r in rounds if r) == sorted(["aaa", "bbb"] * MIN_ROUNDS)  # 3 calls between two syncs


def test_bench_models_compile_compiles_the_blocks_it_times():
    from dgmoe.bench.models import ModelBenchConfig, _build

    model = _build("gmoe_micro_patch7_28", ModelBenchConfig(("gmoe_micro_patch7_28",), img_size=28, compile=True))
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    eager = _build("gmoe_micro_patch7_28", ModelBenchConfig(("gmoe_micro_patch7_28",), img_size=28))
    assert all(block._compiled_call_impl is None for block in eager.blocks)


def test_bench_models_steps_the_fused_optimizer_when_asked():
    from dgmoe.bench.models import ModelBenchConfig, _build, _steps

    for fused in (False, True):
        cfg = ModelBenchConfig(("vit_micro_patch7_28",), img_size=28, batch_size=2, fused_optimizer=fused)
        train_step, _ = _steps(_build("vit_micro_patch7_28", cfg), cfg)
        train_step()
        assert all(bool(group["fused"]) is fused for group in train_step.optimizer.param_groups)


def test_bench_data_prints_the_loader_beside_the_model_step():
    result = CliRunner().invoke(main, ["bench", "data", "--dataset", "RotatedMNIST", "--model", "vit_micro_patch7_28",
                                       "--n-per-domain", "40", "--workers", "0,1", "--timed-steps", "2"])
    assert result.exit_code == 0, result.output
    rows = [line.split("|") for line in result.output.splitlines() if line.startswith("|") and "---" not in line]
    header, body = [c.strip() for c in rows[0]], rows[1:]
    assert header[1:9] == ["workers", "loader (img/s)", "model step (img/s)", "loader / step", "training loop (img/s)",
                           "loop / step", "evaluation (img/s)", "first evaluation (img/s)"]
    assert [int(r[1]) for r in body] == [0, 1]
    for r in body:
        loader, step, ratio, loop, share, evaluation, first = (float(r[i]) for i in range(2, 9))
        assert loader > 0 and step > 0 and ratio == pytest.approx(loader / step, rel=1e-2)
        assert loop > 0 and share == pytest.approx(loop / step, rel=1e-2)
        assert evaluation > 0 and first > 0
    bad = CliRunner().invoke(main, ["bench", "data", "--workers", "0,x"])
    assert bad.exit_code != 0 and "--workers" in bad.output


@pytest.mark.parametrize("kind", ["kadaptation", "lora"])
def test_moas_dense_then_mask_layer_and_dgmoes_dispatches_compute_the_same(kind):
    """The MoA rows of `bench layer` (MoA's dense-then-mask, dgmoe's sorted and fixed-shape dispatches) time
    one function: equal outputs, balance losses and gradients."""
    dense_name, *dgmoe_names = (n for n, (k, _) in MOA_CANDIDATES.items() if k == kind)
    assert len(dgmoe_names) == 2
    x = torch.randn(40, 64)
    results = []
    for name in (dense_name, *dgmoe_names):
        torch.manual_seed(0)
        layer = moa_layer(name, 64).train()
        if kind == "kadaptation":
            layer.adapter.experts.weight_drop.p = 0.0  # its dropout draws differ in number between the two
        else:
            with torch.no_grad():  # B = 0 at the start: give every path a gradient
                layer.adapter.experts.lora_B[0].copy_(torch.randn(192, 1, generator=torch.Generator().manual_seed(2)))
        torch.manual_seed(1)  # the same gate noise
        y = layer(x)
        aux = layer.adapter.aux_losses()["balance"]
        (y.square().sum() + aux).backward()
        results.append((y, aux, {n: p.grad for n, p in layer.named_parameters() if p.requires_grad}))
    (y0, a0, g0) = results[0]
    assert moa_layer(dense_name, 64).adapter.dispatch_override is dense_then_mask_dispatch
    for y1, a1, g1 in results[1:]:
        torch.testing.assert_close(y0, y1, rtol=0, atol=1e-5)
        torch.testing.assert_close(a0, a1)
        for n in g0:  # fp32 sums in another order (the fixed-shape path): within 1e-5 of the tensor's largest entry
            ref = g0[n] if g0[n] is not None else torch.zeros(())
            torch.testing.assert_close(ref, g1[n] if g1[n] is not None else torch.zeros(()), rtol=1e-4,
                                       atol=1e-4 + 1e-5 * ref.abs().max().item(), msg=lambda m: f"{n}: {m}")
