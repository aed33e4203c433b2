"""`dgmoe algorithms` listing and the cost-table benchmark."""
import pytest
from click.testing import CliRunner
from md_tables import table_rows

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.bench.algorithms import AlgorithmCost, benchmark_algorithms, cost_table, cost_warnings
from dgmoe.bench.config import BenchmarkConfig
from dgmoe.cli.algorithms import command


def test_lists_every_algorithm_with_description_and_reference():
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    for name in list_algorithms():
        cls = get_algorithm(name)
        assert f"{name:9s} {cls.DESCRIPTION}" in result.output
        assert cls.REFERENCE in result.output
    assert "IRM" in result.output and "[needs >= 2 training domains]" in result.output
    short = CliRunner().invoke(command, ["--no-references"])
    assert "Arjovsky" not in short.output and "IRM" in short.output


def test_cost_table_is_relative_to_erm_with_the_spread_over_rounds():
    rows = [AlgorithmCost("ERM", 2.0, 100.0, (2.0,) * 5), AlgorithmCost("Fish", 5.0, 50.0, (4.0, 5.0, 5.0, 5.0, 6.0))]
    table = cost_table(rows, "t").markdown()
    assert ["ERM", "2.000", "1.00x", "1.00-1.00", "100", "1.00x"] in table_rows(table)
    assert ["Fish", "5.000", "2.50x", "2.50-2.50", "50", "0.50x"] in table_rows(table)
    assert cost_warnings(rows) == []


def test_cost_warnings_flag_rounds_that_disagree_and_steps_too_short_to_time():
    """Fake timings: the verdict does not depend on this machine's speed."""
    erm = AlgorithmCost("ERM", 1.0, 100.0, (1.0,) * 6)
    noisy = AlgorithmCost("DANN", 0.7, 100.0, (0.3, 1.1, 0.3, 1.1, 0.3, 1.1))
    (warning,) = cost_warnings([erm, noisy])
    assert warning.startswith("DANN vs ERM: the ratio varies between rounds (IQR 0.300-1.100")
    tiny = [AlgorithmCost("ERM", 1e-3, 1.0, (1e-3,) * 6), AlgorithmCost("IRM", 1e-3, 1.0, (1e-3,) * 6)]
    assert any(w.startswith("IRM vs ERM: a call takes 1.00 ms") for w in cost_warnings(tiny))


def test_benchmark_config_validation():
    with pytest.raises(ValueError, match="include 'ERM'"):
        BenchmarkConfig("vit_tiny_patch16_224", ("IRM",))
    with pytest.raises(ValueError, match="steps >= 5"):
        BenchmarkConfig("vit_tiny_patch16_224", ("ERM",), steps=2)
    with pytest.raises(ValueError, match="warmup >= 1"):
        BenchmarkConfig("vit_tiny_patch16_224", ("ERM",), warmup=0)
    bad = CliRunner().invoke(command, ["bench", "--steps", "2"])
    assert bad.exit_code != 0 and "--steps" in bad.output


@pytest.mark.slow
def test_benchmark_measures_every_algorithm():
    config = BenchmarkConfig("gmoe_tiny_patch16_224", ("ERM", "Fish"), steps=5, warmup=1, img_size=16,
                             batch_per_domain=4, model_overrides=(("depth", 2), ("embed_dim", 32), ("num_heads", 2),
                                                                  ("moe_layers", (1,))))
    results = benchmark_algorithms(config)
    assert [r.algorithm for r in results] == ["ERM", "Fish"]
    assert all(r.step_time_s > 0 and len(r.step_times_s) == 5 and r.peak_memory_mb >= 0 for r in results)


def test_bench_prints_the_table_under_its_bold_title_and_the_refused_algorithms_after_it(monkeypatch):
    """The command renders the `cost_table` the builder returns (fake timings: no worker is started)."""
    import dgmoe.bench.algorithms as bench

    fake = [AlgorithmCost("ERM", 2.0, 100.0, (2.0,) * 5), AlgorithmCost("Fish", 5.0, 50.0, (5.0,) * 5),
            AlgorithmCost.refused("MoGE", "no image-routed experts"), AlgorithmCost.refused("IRM", "why")]
    monkeypatch.setattr(bench, "benchmark_algorithms", lambda config: fake)
    result = CliRunner().invoke(command, ["bench", "--algorithms", "ERM,Fish,MoGE,IRM", "--backbone", "vit_tiny"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("**vit_tiny at ") and lines[0].endswith("**") and lines[1] == ""
    assert lines[2].startswith("| algorithm ") and lines[5].startswith("| Fish ")
    assert lines[6:9] == ["", "not measured: MoGE (no image-routed experts)", "not measured: IRM (why)"]
    assert table_rows("\n".join(lines[2:6]))[-1] == ["Fish", "5.000", "2.50x", "2.50-2.50", "50", "0.50x"]
