"""Benchmark 5: peak RSS of a worker process that handles 100k effects.

A fresh process (so its peak is its own) runs effects one after another as the
node does (``prepare(owner=...)`` then ``confirm``) against a ledger, and
samples its resident set every tenth of the run. Two ledgers:

- ``sqlite``: ``SQLiteLedger`` on a temporary file, ``synchronous=NORMAL``
  (rows live on disk, so RSS must stay flat: growth here is a leak);
- ``memory``: ``InMemoryLedger`` (keeps every row and event in the process, so
  RSS grows with the number of effects: this measures the cost of a record).

Run: ``python -m benchmarks.memory [--effects 100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from benchmarks._common import Report, sqlite_dir, write_json

__all__ = ["main", "run"]


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker(backend: str, effects: int, path: str) -> dict[str, Any]:
    """Runs in the child: process ``effects`` effects, sampling RSS."""
    from benchmarks import _effects
    from langgraph_effects._owners import current_owner

    owner = current_owner()
    samples: list[tuple[int, float]] = []
    # The peak comes from a sampler thread, not ru_maxrss: Linux carries
    # ru_maxrss across fork + exec, so a child of a big parent starts with
    # the parent's high-water mark.
    peak = [_rss_mb()]
    running = threading.Event()
    running.set()

    def sample() -> None:
        while running.is_set():
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if backend == "sqlite":
        from langgraph_effects import SQLiteLedger

        # NORMAL: durability does not change what the process holds in memory,
        # and FULL would spend minutes in fsync for the same answer.
        opened: Any = SQLiteLedger.from_conn_string(path, synchronous="NORMAL")
    else:
        from langgraph_effects import InMemoryLedger

        opened = _null(InMemoryLedger())
    with opened as ledger:
        ledger.setup()
        for i in range(200):  # warm up imports, caches and prepared statements
            _effects.fused(ledger, _effects.draft(f"warm-{i}"), owner)
        samples.append((0, _rss_mb()))
        step = max(1, effects // 50)
        start = time.perf_counter()
        for i in range(effects):
            _effects.fused(ledger, _effects.draft(f"m-{i}"), owner)
            if (i + 1) % step == 0:
                samples.append((i + 1, _rss_mb()))
        elapsed = time.perf_counter() - start
    samples.append((effects, _rss_mb()))  # after the ledger closed
    running.clear()
    sampler.join()
    return {
        "backend": backend,
        "effects": effects,
        "seconds": elapsed,
        "baseline_rss_mb": samples[0][1],
        "final_rss_mb": samples[-2][1],
        "peak_rss_mb": max(peak[0], *(rss for _, rss in samples)),
        "growth_kb_per_1k_effects": (samples[-2][1] - samples[0][1]) * 1024 / (effects / 1000),
        "samples": samples,
    }


class _null:
    """``with`` over an object that is not a context manager."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: object) -> None:
        return None


def measure(backend: str, effects: int) -> dict[str, Any]:
    with sqlite_dir() as directory:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.memory",
                "--worker",
                backend,
                "--effects",
                str(effects),
                "--path",
                str(directory / "memory.db"),
            ],
            check=False,
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    if out.returncode:
        raise RuntimeError(f"memory worker failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(*, effects: int = 100_000, backends: Sequence[str] = ("sqlite", "memory")) -> Report:
    report = Report(
        name="memory: a worker process handling effects (fused prepare+confirm)",
        columns=[
            "ledger",
            "effects",
            "seconds",
            "baseline MB",
            "final MB",
            "peak MB",
            "KB/1k effects",
        ],
    )
    for backend in backends:
        row = measure(backend, effects)
        report.data[backend] = row
        report.add(
            backend,
            effects,
            row["seconds"],
            row["baseline_rss_mb"],
            row["final_rss_mb"],
            row["peak_rss_mb"],
            row["growth_kb_per_1k_effects"],
        )
    report.notes.append(
        "sqlite: rows on disk, RSS should stay flat; memory: InMemoryLedger keeps every record; "
        "peak: RSS sampled every 5 ms from the start of the worker to after the ledger closed"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--effects", type=int, default=100_000)
    parser.add_argument("--worker", choices=["sqlite", "memory"])
    parser.add_argument("--path", default="")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.effects, args.path)))
        return None
    report = run(effects=args.effects)
    print(report.table())
    write_json("memory.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
