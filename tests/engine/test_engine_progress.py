"""`Progress`: a bar on a terminal, otherwise a line after the first update and then at least every `every_s`
seconds while updates come. Every verdict here runs on a fake clock, never on the machine's speed."""
import io

import pytest

from dgmoe.engine.progress import Progress, resolve_mode


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_come_after_the_first_update_then_every_interval():
    clock, said = FakeClock(), []
    progress = Progress(100, mode="lines", every_s=20.0, unit="step", desc="MLP seed 0", write=said.append,
                        clock=clock)
    for _ in range(10):
        clock.now += 7.0
        progress.update()
    assert [line.split(": ")[1].split(" ")[0] for line in said] == ["1/100", "4/100", "7/100", "10/100"]
    assert said[1] == "MLP seed 0: 4/100 steps (4%), 0:00:28 elapsed, eta 0:11:12"  # 96 steps x 7 s


@pytest.mark.parametrize("step_s", [0.5, 3.0, 19.0])
def test_while_updates_come_no_gap_between_lines_exceeds_the_interval_by_more_than_one_update(step_s):
    clock, times = FakeClock(), []
    progress = Progress(10_000, mode="lines", every_s=20.0, write=lambda line: times.append(clock.now), clock=clock)
    while clock.now < 300:
        clock.now += step_s
        progress.update()
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 300 // (20 + step_s) and all(20.0 <= gap < 20.0 + step_s + 1e-9 for gap in gaps)


def test_mark_restarts_the_wait_and_a_custom_line_is_used():
    clock, said = FakeClock(), []
    progress = Progress(10, mode="lines", every_s=20.0, write=said.append, clock=clock)
    progress.update(line=lambda: "first")
    clock.now = 19.0
    progress.mark()  # e.g. a checkpoint line was just printed
    clock.now = 30.0
    progress.update(line=lambda: "too soon")
    clock.now = 39.0
    progress.update(line=lambda: "second")
    assert said == ["first", "second"]


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert resolve_mode("auto", FakeTerminal()) == "bar" and resolve_mode("auto", io.StringIO()) == "lines"
    terminal = FakeTerminal()
    with Progress(3, mode="auto", unit="net", stream=terminal) as progress:
        progress.describe("FCN seed 2")
        progress.write("a message above the bar")
        progress.update(3, loss="0.1")
    shown = terminal.getvalue()
    assert "a message above the bar" in shown and "FCN seed 2" in shown and "3/3" in shown


def test_none_prints_nothing():
    said = []
    progress = Progress(5, mode="none", write=said.append)
    progress.update(5)
    progress.write("hello")
    assert said == []


def test_default_line_spells_the_unit_in_the_plural():
    from dgmoe.engine.progress import Progress

    said: list[str] = []
    Progress(4, mode="lines", unit="process", desc="bench", write=said.append, clock=lambda: 0.0).update()
    Progress(4, mode="lines", unit="round", write=said.append, clock=lambda: 0.0).update()
    assert said[0].startswith("bench: 1/4 processes (25%)") and said[1].startswith("1/4 rounds (25%)")
