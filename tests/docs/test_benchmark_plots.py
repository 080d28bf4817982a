"""The benchmark pictures of docs/benchmarks.md are drawn from the committed results.

``docs/images/benchmarks/SOURCE`` names the run and the digest of the results the pictures
were drawn from: committed results without their pictures fail here, until
``python -m benchmarks.plots`` draws them again. The script itself is run too, into a
temporary directory: the same pictures, the same sizes in pixels.
"""

from __future__ import annotations

import struct
from pathlib import Path

from benchmarks import plots


def _size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    return width, height


def test_the_committed_pictures_are_drawn_from_the_committed_results() -> None:
    """SOURCE carries the digest of benchmarks/results/latest.json as committed."""
    recorded = (plots.OUT / "SOURCE").read_text(encoding="utf-8")
    assert recorded == plots.source_line(plots.RESULTS), (
        "benchmarks/results/latest.json changed: run python -m benchmarks.plots"
    )


def test_the_script_draws_the_same_pictures(tmp_path: Path) -> None:
    """Drawn again from the committed results: each picture, at its committed size."""
    drawn = plots.draw(plots.RESULTS, tmp_path)
    assert [p.name for p in drawn] == list(plots.PICTURES)
    for path in drawn:
        committed = plots.OUT / path.name
        assert _size(path.read_bytes()) == _size(committed.read_bytes()), path.name
    assert (tmp_path / "SOURCE").read_text() == (plots.OUT / "SOURCE").read_text()
