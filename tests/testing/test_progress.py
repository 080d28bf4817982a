"""Long work shows progress: done out of planned, elapsed, and an estimate of the time left."""

from __future__ import annotations

import io
import threading

from langgraph_effects.testing._progress import Progress


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_say_done_planned_elapsed_and_time_left() -> None:
    """Without a terminal: a line when the part starts, one per ``every`` seconds with the
    share done and an estimate from the pace so far, and one when it ends."""
    out, clock = io.StringIO(), Clock()
    progress = Progress("campaign", stream=out, bar=False, every=10, clock=clock)
    with progress.part("randomized", 200, "schedules") as advance:
        clock.now += 5
        advance(10)  # within 10 s of the last line: quiet
        clock.now += 15
        advance(40)  # 50 done in 20 s: 150 more take about 60 s
        clock.now += 60
        advance(150)
    assert out.getvalue().splitlines() == [
        "campaign: randomized 0/200 schedules (0%), 0s elapsed",
        "campaign: randomized 50/200 schedules (25%), 20s elapsed, about 1m 0s left",
        "campaign: randomized 200/200 schedules (100%), 1m 20s elapsed, done",
    ]


def test_threads_may_advance_one_part_together() -> None:
    """The campaign's pools advance from many threads: every unit is counted once."""
    out = io.StringIO()
    progress = Progress("campaign", stream=out, bar=False, every=3600)
    with progress.part("kills", 400, "kill cases") as advance:
        workers = [
            threading.Thread(target=lambda: [advance(1) for _ in range(100)]) for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert out.getvalue().splitlines()[-1].startswith("campaign: kills 400/400 kill cases (100%)")


def test_a_terminal_gets_a_rich_bar_with_the_time_left() -> None:
    """With a bar (a terminal): rich draws the part, its count and the time remaining."""
    out = io.StringIO()
    progress = Progress("campaign", stream=out, bar=True)
    with progress.part("randomized", 4, "schedules") as advance:
        advance(4)
    drawn = out.getvalue()
    assert "campaign: randomized" in drawn
    assert "4/4" in drawn
    assert "left" in drawn
