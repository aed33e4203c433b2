"""`dgmoe quickstart`'s `train time (s)`: the time a run took, as its records account for it, whether the call
trained it, found it finished, or resumed it (a call that found a run finished used to report its own 0 s)."""
import time

import pytest

from dgmoe.experiments import quickstart as qs


def test_run_seconds_adds_every_segment_of_a_resumed_run():
    records = [  # checkpoints at steps 0, 2 (first process) and 5 (resumed process): 1 + 2 + 3 steps
        {"step": 0, "step_time": 1.0, "eval_time": 0.5},
        {"step": 2, "step_time": 2.0, "eval_time": 0.5},
        {"step": 5, "step_time": 3.0, "eval_time": 1.0},
    ]
    assert qs.run_seconds(records) == pytest.approx(1.0 + 0.5 + 2 * 2.0 + 0.5 + 3 * 3.0 + 1.0)


def test_run_seconds_of_a_zero_step_run_is_its_evaluation():
    assert qs.run_seconds([{"step": 0, "eval_time": 0.25}]) == 0.25


def test_a_finished_run_reports_the_time_it_took_not_zero(tmp_path):
    kw = dict(steps=2, checkpoint_freq=1, models=("vit_micro_patch7_28",), say=lambda line: None)
    start = time.perf_counter()
    first = qs.quickstart(tmp_path, **kw)
    wall = time.perf_counter() - start
    again = qs.quickstart(tmp_path, **kw)  # the run is finished: nothing trains
    seconds = first[0]["train time (s)"]
    assert 0 < seconds < wall
    assert again[0]["train time (s)"] == seconds and again == first
