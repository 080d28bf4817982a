"""The benchmark pictures of docs/benchmarks.md, drawn from a full run's results.

``python -m benchmarks.plots [RESULTS]`` reads ``benchmarks/results/latest.json`` (or
``RESULTS``, a full run's JSON) and writes three small PNGs into ``docs/images/benchmarks/``,
with ``SOURCE`` beside them: the date of the run and the SHA-256 of the JSON they were drawn
from, so ``tests/docs/test_benchmark_plots.py`` can tell committed pictures that no longer
match the committed results. A full ``python -m benchmarks`` run draws them itself.
Drawn with matplotlib alone (the ``dev`` extra), no network.

- ``overhead.png``: each face's time per invoke divided by a plain ``ToolNode``'s, 1 and 10
  calls, SQLite and PostgreSQL, beside the targets (1.10 and 1.15);
- ``split.png``: what an effect adds per invoke, split into the package's Python (the same
  node on an ``InMemoryLedger``) and the ledger's I/O;
- ``throughput.png``: confirmed effects per second on PostgreSQL by worker processes, the
  ledger beside the raw-SQL floor of the same statements.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
OUT = ROOT / "docs" / "images" / "benchmarks"
PICTURES = ("overhead.png", "split.png", "throughput.png")
DPI = 80
BACKENDS = (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
FACES = (  # (suffix of the ratio's name, label)
    ("", "EffectToolNode\ntools_condition"),
    ("_per_call", "EffectToolNode\nroute_tool_calls"),
    ("_middleware", "EffectMiddleware\ncreate_agent"),
    ("_async", "async ledger\nainvoke"),
)


def source_line(results: Path) -> str:
    """What ``SOURCE`` says: the run's date and the digest of the JSON."""
    data = json.loads(results.read_text(encoding="utf-8"))
    digest = hashlib.sha256(results.read_bytes()).hexdigest()
    return f"{data['machine']['date']} sha256:{digest}\n"


def _rows(data: dict[str, Any], report: str) -> list[dict[str, Any]]:
    table = data["reports"][report]
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)


def _overhead(data: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    ratios = data["ratios"]
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.4), sharey=True)
    width = 0.36
    for ax, (backend, title) in zip(axes, BACKENDS, strict=True):
        xs = range(len(FACES))
        for offset, n, colour in ((-width / 2, 1, "#1f77b4"), (width / 2, 10, "#ff9800")):
            values = [ratios[f"{backend}_n{n}{suffix}"] for suffix, _ in FACES]
            ax.bar([x + offset for x in xs], values, width, label=f"{n} call(s)", color=colour)
        for target, style in ((1.10, "--"), (1.15, ":")):
            ax.axhline(target, color="#333333", linestyle=style, linewidth=1)
        ax.set_xticks(list(xs), [label for _, label in FACES], fontsize=8)
        ax.set_title(title, fontsize=11)
        ax.set_ylim(1.0, 1.8)
    axes[0].set_ylabel("time per invoke ÷ plain ToolNode")
    axes[0].legend(fontsize=8, loc="upper left")
    axes[1].text(3.6, 1.10, "target 1 call", fontsize=7, va="bottom", ha="right")
    axes[1].text(3.6, 1.15, "target 10 calls", fontsize=7, va="bottom", ha="right")
    fig.tight_layout()
    _save(fig, path)


def _split(data: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = [r for r in _rows(data, "tool_call") if r["router"] == "one task"]
    labels = [f"{dict(BACKENDS)[r['backend']]}\nN = {r['N']}" for r in rows]
    engine = [r["engine +ms/effect"] for r in rows]
    ledger = [r["ledger +ms/effect"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    xs = range(len(rows))
    ax.bar(xs, engine, 0.55, label="the package's Python (engine)", color="#1f77b4")
    ax.bar(xs, ledger, 0.55, bottom=engine, label="the ledger's I/O", color="#9e9e9e")
    ax.set_xticks(list(xs), labels, fontsize=9)
    ax.set_ylabel("ms added per effect")
    ax.set_title("what an effect adds to an invoke (tools_condition)", fontsize=11)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _throughput(data: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    rows = _rows(data, "concurrency")
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for shape, label, colour in (
        ("ledger", "the ledger", "#2ca02c"),
        ("floor", "raw-SQL floor", "#9e9e9e"),
    ):
        points = sorted((r["workers"], r["effects/s"]) for r in rows if r["shape"] == shape)
        ax.plot(*zip(*points, strict=True), marker="o", label=label, color=colour)
    ax.axhline(2500, color="#333333", linestyle="--", linewidth=1)
    ax.text(16, 2500, "target at 8 workers", fontsize=7, va="bottom", ha="right")
    ax.set_xlabel("worker processes (2 cores)")
    ax.set_ylabel("confirmed effects / s")
    ax.set_xticks(sorted({r["workers"] for r in rows}))
    ax.set_ylim(0, 3000)
    ax.set_title("throughput on PostgreSQL", fontsize=11)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    _save(fig, path)


def draw(results: Path = RESULTS, out: Path = OUT) -> list[Path]:
    """Write the pictures and ``SOURCE`` into ``out``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    data = json.loads(results.read_text(encoding="utf-8"))
    if data.get("mode") != "full":
        raise SystemExit(f"{results}: a {data.get('mode')!r} run; the pictures need a full run")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in PICTURES]
    for drawing, path in zip((_overhead, _split, _throughput), paths, strict=True):
        drawing(data, path)
    (out / "SOURCE").write_text(source_line(results), encoding="utf-8")
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (docs/images/...)")
    args = parser.parse_args(argv)
    for path in draw(args.results, args.out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
