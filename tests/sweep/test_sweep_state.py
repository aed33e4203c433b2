"""Job states from marker files: done, running (fresh heartbeat), failed, queued, incomplete."""
import json
import os
import socket
import subprocess
import sys
import time

from dgmoe.sweep import state
from dgmoe.sweep.state import JobState, job_state


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_states_and_precedence(tmp_path):
    d = tmp_path / "job"
    assert job_state(d) is JobState.NOT_LAUNCHED
    d.mkdir()
    assert job_state(d) is JobState.INCOMPLETE
    state.mark_submitted(d, "submitit", scheduler_job_id="123")
    assert job_state(d) is JobState.QUEUED
    state.mark_failed(d, 2, ["x"])
    assert job_state(d) is JobState.FAILED
    assert state.acquire_running(d, state.runner_info("local"))
    assert job_state(d) is JobState.RUNNING
    (d / "done").write_text("done")
    assert job_state(d) is JobState.DONE


def test_stale_heartbeat_is_not_running(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    info = {"host": "some-other-node", "pid": 1, "launcher": "submitit"}
    assert state.acquire_running(d, info)
    assert job_state(d) is JobState.RUNNING  # another host: trusted while fresh
    old = time.time() - state.STALE_AFTER_S - 5
    os.utime(d / state.RUNNING_NAME, (old, old))
    assert job_state(d) is JobState.INCOMPLETE
    state.touch_heartbeat(d)
    assert job_state(d) is JobState.RUNNING


def test_dead_pid_on_this_host_is_not_running_or_queued(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    dead = {"host": socket.gethostname(), "pid": _dead_pid()}
    (d / state.RUNNING_NAME).write_text(json.dumps(dead))  # fresh mtime, but its process is gone
    assert job_state(d) is JobState.INCOMPLETE
    (d / state.SUBMITTED_NAME).write_text(json.dumps({"launcher": "local", **dead}))
    assert job_state(d) is JobState.INCOMPLETE
    state.mark_submitted(d, "local", local=True)  # this (live) process
    assert job_state(d) is JobState.QUEUED


def test_acquire_is_exclusive_and_takes_over_stale_claims(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    assert state.acquire_running(d, {"host": "n1", "pid": 1})
    assert not state.acquire_running(d, {"host": "n2", "pid": 2})
    old = time.time() - state.STALE_AFTER_S - 5
    os.utime(d / state.RUNNING_NAME, (old, old))
    assert state.acquire_running(d, {"host": "n2", "pid": 2})
    assert json.loads((d / state.RUNNING_NAME).read_text())["host"] == "n2"
    state.release_running(d)
    assert job_state(d) is JobState.INCOMPLETE


def test_count_states_lists_every_state():
    counts = state.count_states([JobState.DONE, JobState.DONE, JobState.FAILED])
    assert list(counts) == list(JobState)
    assert counts[JobState.DONE] == 2 and counts[JobState.FAILED] == 1 and counts[JobState.RUNNING] == 0


def test_delete_unfinished_keeps_done_and_running(tmp_path):
    dirs = {name: tmp_path / name for name in ("done", "run", "fail", "inc")}
    for p in dirs.values():
        p.mkdir()
    (dirs["done"] / "done").write_text("done")
    state.acquire_running(dirs["run"], state.runner_info("local"))
    state.mark_failed(dirs["fail"], 1, [])
    deleted = state.delete_unfinished(dirs.values(), include_failed=False)
    assert deleted == [dirs["inc"]]
    assert state.delete_unfinished(dirs.values()) == [dirs["fail"]]
    assert dirs["done"].exists() and dirs["run"].exists()
