"""`dgmoe.engine.step_metrics`: metrics summed where they are computed (tensors stay on the device) and read
back once, at a checkpoint."""
import pytest
import torch

from dgmoe.engine.step_metrics import LazyMetrics, StepMetrics


def test_step_metrics_sum_tensors_and_floats_and_read_them_once():
    metrics = StepMetrics()
    values = [{"loss": torch.tensor(0.5), "step_time": 0.1}, {"loss": torch.tensor(1.25), "step_time": 0.3}]
    for v in values:
        metrics.add(v)
    means = metrics.means()
    assert means == {"loss": pytest.approx(0.875), "step_time": pytest.approx(0.2)}
    assert all(isinstance(v, float) for v in means.values())
    lazy = LazyMetrics(values[0])
    assert lazy["loss"] == 0.5 and dict(lazy) == {"loss": 0.5, "step_time": 0.1}
    metrics.clear()
    assert metrics.means() == {}
