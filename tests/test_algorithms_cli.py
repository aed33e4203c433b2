"""`dgmoe algorithms` listing and the cost-table benchmark."""
import pytest
from click.testing import CliRunner

from dgmoe.algorithms import get_algorithm, list_algorithms
from dgmoe.algorithms.benchmark import AlgorithmCost, BenchmarkConfig, benchmark_algorithms, cost_table_markdown
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


def test_cost_table_is_relative_to_erm():
    rows = [AlgorithmCost("ERM", 2.0, 100.0, (2.0,)), AlgorithmCost("Fish", 5.0, 50.0, (5.0,))]
    table = cost_table_markdown(rows, "t")
    assert "| ERM | 2.000 | 1.00x | 100 | 1.00x |" in table
    assert "| Fish | 5.000 | 2.50x | 50 | 0.50x |" in table


def test_benchmark_config_validation():
    with pytest.raises(ValueError, match="include 'ERM'"):
        BenchmarkConfig("vit_tiny_patch16_224", ("IRM",))
    with pytest.raises(ValueError, match="steps"):
        BenchmarkConfig("vit_tiny_patch16_224", ("ERM",), steps=0)


@pytest.mark.slow
def test_benchmark_measures_every_algorithm():
    config = BenchmarkConfig("gmoe_tiny_patch16_224", ("ERM", "Fish"), steps=2, warmup=1, img_size=16,
                             batch_per_domain=4, model_overrides=(("depth", 2), ("embed_dim", 32), ("num_heads", 2),
                                                                  ("moe_layers", (1,))))
    results = benchmark_algorithms(config)
    assert [r.algorithm for r in results] == ["ERM", "Fish"]
    assert all(r.step_time_s > 0 and len(r.step_times_s) == 2 and r.peak_memory_mb >= 0 for r in results)
