"""Progress of long work (the recovery campaign, the benchmarks): done, planned, time left.

On a terminal, a ``rich`` progress bar per part with its elapsed time and ETA (rich
comes with the ``cli`` extra); without rich, or in a pipe or a CI log, one plain line
per part every ``every`` seconds and when it ends::

    campaign: randomized 400/2000 schedules (20%), 1m 12s elapsed, about 4m 48s left

Lines go to stderr, so the result on stdout stays clean. ``Progress.part`` is safe
to advance from several threads (the campaign's worker pools).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["Progress"]

Advance = Callable[[int], None]
"""``advance(n)``: ``n`` more units of the current part are done."""


def _duration(seconds: float) -> str:
    """``1m 12s``, ``2h 3m``, ``40s``: two units are enough."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


class Progress:
    """Report the parts of a long run as they progress.

    Args:
        label: what runs (``campaign``), the prefix of each plain line.
        stream: where progress goes (default: stderr).
        bar: a rich bar (True), plain lines (False), or a bar only when ``stream``
            is a terminal and rich is importable (None, the default).
        every: seconds between plain lines of one part.
        clock: the time source (tests pass a fake one).
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        bar: bool | None = None,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.clock = clock
        if bar is None:
            bar = self.stream.isatty() and _rich_available()
        self.bar = bar

    @contextlib.contextmanager
    def part(self, name: str, total: int, unit: str) -> Iterator[Advance]:
        """Track one part of ``total`` units; yields ``advance(n)``; it ends with the block."""
        if self.bar:
            with self._rich(name, total, unit) as step:
                yield step
            return
        lock = threading.Lock()
        started = self.clock()
        state = {"done": 0, "said": started}

        def say(done: int, now: float) -> None:
            elapsed = now - started
            share = f" ({100 * done // total}%)" if total else ""
            line = (
                f"{self.label}: {name} {done}/{total} {unit}{share}, {_duration(elapsed)} elapsed"
            )
            if done >= total:
                line += ", done"
            elif done:
                line += f", about {_duration(elapsed / done * (total - done))} left"
            print(line, file=self.stream, flush=True)

        def advance(n: int = 1) -> None:
            with lock:
                state["done"] += n
                now = self.clock()
                if state["done"] < total and now - state["said"] >= self.every:
                    state["said"] = now
                    say(int(state["done"]), now)

        say(0, started)
        yield advance
        say(max(int(state["done"]), total), self.clock())

    @contextlib.contextmanager
    def _rich(self, name: str, total: int, unit: str) -> Iterator[Advance]:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        columns: list[Any] = [
            TextColumn(f"{self.label}: {name}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
        ]
        with Bar(*columns, console=Console(file=self.stream)) as bar:
            task = bar.add_task(name, total=total)

            def advance(n: int = 1) -> None:
                bar.advance(task, n)

            yield advance
            bar.update(task, completed=total)


def _rich_available() -> bool:
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True
