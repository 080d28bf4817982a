"""Pictures for the notebooks, drawn with matplotlib alone: no network, no Graphviz.

Not part of the library. Three drawings, each returned as a small PNG
(``IPython.display.Image``) so a committed notebook stays light:

- ``graph_picture(graph)``: a compiled LangGraph graph, laid out in layers
  from ``START`` (LangGraph's own ``draw_mermaid_png`` calls a web service);
- ``state_picture()``: the operation state machine, drawn from the library's
  transition table (``langgraph_effects.core.transitions.TRANSITIONS``), so the
  picture cannot drift from the code;
- ``timeline_picture(steps)``: one operation's story (a crash and a resume, a
  review), step by step, one lane per process or person (and one for the provider).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # render to bytes; never needs a display

import matplotlib.pyplot as plt
from IPython.display import Image
from matplotlib.patches import FancyBboxPatch

from langgraph_effects import OperationStatus
from langgraph_effects.core.transitions import TRANSITIONS

__all__ = ["COLORS", "graph_picture", "state_picture", "timeline_picture"]

DPI = 80
COLORS = {
    OperationStatus.PREPARED: "#9e9e9e",
    OperationStatus.DISPATCHING: "#1f77b4",
    OperationStatus.UNKNOWN: "#ff9800",
    OperationStatus.CONFIRMED: "#2ca02c",
    OperationStatus.REJECTED: "#d62728",
}


def _png(fig: Any) -> Image:
    buffer = io.BytesIO()
    # No "Software" stamp: the bytes depend on the drawing alone.
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return Image(data=buffer.getvalue(), format="png")


def _box(ax: Any, x: float, y: float, text: str, color: str, *, round_: bool = True) -> None:
    width, height = 0.5 + 0.14 * len(text), 0.5
    style = "round,pad=0.05,rounding_size=0.2" if round_ else "square,pad=0.05"
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle=style,
            facecolor=color,
            edgecolor="#333333",
            linewidth=1.2,
            alpha=0.9,
            zorder=2,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=11, color="white", zorder=3)


def _arrow(
    ax: Any,
    start: tuple[float, float],
    end: tuple[float, float],
    *,
    rad: float = 0.0,
    dashed: bool = False,
    label: str = "",
    label_at: float = 0.5,
    shrink: float = 24,
) -> None:
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops={
            "arrowstyle": "-|>",
            "color": "#333333",
            "linewidth": 1.2,
            "linestyle": "--" if dashed else "-",
            "connectionstyle": f"arc3,rad={rad}",
            "shrinkA": shrink,
            "shrinkB": shrink,
        },
        zorder=1,
    )
    if label:
        # On the chord at ``label_at``, pushed off it as matplotlib's arc3 curve
        # is there: at the middle, half of ``rad`` times the chord along its
        # normal (equal axes), less towards the ends (a quadratic Bezier).
        (x1, y1), (x2, y2) = start, end
        t = label_at
        bulge = 2 * t * (1 - t) * rad
        ox, oy = bulge * (y2 - y1), -bulge * (x2 - x1)
        mx, my = x1 + t * (x2 - x1) + ox, y1 + t * (y2 - y1) + oy
        # Beside a vertical curve, the label reads outwards from it.
        ha = "center" if abs(ox) <= abs(oy) else "left" if ox > 0 else "right"
        ax.text(
            mx,
            my,
            label,
            ha=ha,
            va="center",
            fontsize=9,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
            zorder=4,
        )


def graph_picture(graph: Any) -> Image:
    """A compiled graph: nodes in layers by distance from START, back edges curved.

    Conditional edges are dashed. Enough for the small agent graphs of the
    notebooks (LangGraph's ``get_graph().draw_ascii()`` is the text twin).
    """
    g = graph.get_graph()
    start = next(n for n in g.nodes if n == "__start__")
    rank = {start: 0}
    frontier = [start]
    while frontier:  # breadth-first: a node's layer is its shortest distance from START
        following = []
        for node in frontier:
            for edge in g.edges:
                if edge.source == node and edge.target not in rank:
                    rank[edge.target] = rank[node] + 1
                    following.append(edge.target)
        frontier = following
    layers: dict[int, list[str]] = {}
    for node in g.nodes:
        layers.setdefault(rank.get(node, max(rank.values()) + 1), []).append(node)
    pos = {
        node: (2.2 * (i - (len(members) - 1) / 2), -1.3 * layer)
        for layer, members in layers.items()
        for i, node in enumerate(sorted(members, key=lambda n: n == "__end__"))
    }
    fig, ax = plt.subplots(figsize=(4.4, 0.9 + 1.1 * len(layers)))
    for node, (x, y) in pos.items():
        terminal = node in ("__start__", "__end__")
        name = {"__start__": "START", "__end__": "END"}.get(node, node)
        _box(ax, x, y, name, "#555555" if terminal else "#1f77b4", round_=not terminal)
    for edge in g.edges:
        back = rank.get(edge.target, 0) <= rank.get(edge.source, 0)
        _arrow(ax, pos[edge.source], pos[edge.target], rad=0.45 if back else 0.0,
               dashed=edge.conditional)  # fmt: skip
    _frame(ax, pos.values())
    return _png(fig)


S = OperationStatus
STATE_POSITIONS = {
    S.PREPARED: (0.0, 0.0),
    S.DISPATCHING: (4.5, 0.0),
    S.CONFIRMED: (9.0, -1.7),
    S.UNKNOWN: (4.5, -3.4),
    S.REJECTED: (0.0, -3.4),
}
# The two diagonals of the square cross: their labels sit near their sources.
LABEL_AT = {(S.DISPATCHING, S.REJECTED): 0.3, (S.UNKNOWN, S.PREPARED): 0.3}
# An arrow whose event kind does not say what moves it: unknown -> prepared is logged as a
# ``resolve`` event, but it is the retry an operator orders (``langgraph-effects retry``).
LABELS = {(S.UNKNOWN, S.PREPARED): "operator retry"}


def state_picture() -> Image:
    """The operation state machine, every arrow read from ``TRANSITIONS``."""
    fig, ax = plt.subplots(figsize=(8.2, 3.9))
    for status, (x, y) in STATE_POSITIONS.items():
        _box(ax, x, y, status.value, COLORS[status])
        if status.terminal:
            ax.text(x, y - 0.45, "terminal", ha="center", va="top", fontsize=9, color="#555555")
    for (source, target), kind in TRANSITIONS.items():
        start, end = STATE_POSITIONS[source], STATE_POSITIONS[target]
        pair = (target, source) in TRANSITIONS  # both ways: bend the two apart
        label = LABELS.get((source, target), kind.value)
        _arrow(ax, start, end, rad=0.2 if pair else 0.0, label=label,
               label_at=LABEL_AT.get((source, target), 0.5), shrink=22)  # fmt: skip
    _frame(ax, STATE_POSITIONS.values())
    return _png(fig)


def timeline_picture(
    steps: Sequence[tuple[str, str, str]], lanes: Sequence[str], *, title: str = ""
) -> Image:
    """One crash-and-resume, left to right: ``steps`` are ``(lane, label, kind)``.

    ``kind``: an ``OperationStatus`` value (a ledger transition into that
    status, coloured as in ``state_picture``), ``"effect"`` (the provider
    applied something), ``"crash"`` (the process died) or ``"note"``.
    """
    row = {lane: -1.1 * i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(1.2 * len(steps) + 2.2, 1.0 * len(lanes) + 0.8))
    fig.subplots_adjust(left=0.02, right=0.98, top=0.88 if title else 0.98, bottom=0.02)
    for lane, y in row.items():
        ax.plot([-0.5, len(steps) - 0.5], [y, y], color="#dddddd", linewidth=1, zorder=0)
        ax.text(-0.65, y, lane, ha="right", va="center", fontsize=10)
    for x, (lane, label, kind) in enumerate(steps):
        y = row[lane]
        if kind == "crash":
            ax.scatter([x], [y], marker="X", s=220, color="#d62728", zorder=3)
        elif kind == "effect":
            ax.scatter([x], [y], marker="*", s=260, color="#6a1b9a", zorder=3)
        elif kind == "note":
            ax.scatter([x], [y], marker="o", s=70, color="#555555", zorder=3)
        else:
            ax.scatter([x], [y], marker="s", s=140, color=COLORS[OperationStatus(kind)], zorder=3)
        ax.text(x, y - 0.22, textwrap.fill(label, 15), ha="center", va="top", fontsize=8.5)
    ax.set_xlim(-0.5 - 0.09 * max(len(lane) for lane in lanes), len(steps) - 0.4)
    ax.set_ylim(min(row.values()) - 0.75, 0.35)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11, loc="left")
    return _png(fig)


def _frame(ax: Any, points: Any) -> None:
    xs, ys = zip(*points, strict=True)
    ax.set_xlim(min(xs) - 1.6, max(xs) + 1.6)
    ax.set_ylim(min(ys) - 0.9, max(ys) + 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
