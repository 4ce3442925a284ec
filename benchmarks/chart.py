"""Bar charts of benchmark results, drawn as PNG with matplotlib's Agg backend.

matplotlib is optional (it comes with the ``bench`` extra): draw() says why it
drew nothing instead of failing, so a benchmark still prints and saves its
numbers without it.  Importing this module does not import matplotlib.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Colours by the family a bar belongs to (the first word of its label), in order of first use.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")

LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8}  # values stay legible


@dataclass
class Bar:
    """One bar: `value` (None: failed or not measured), the range over repeats, its colour family,
    and whether it is hatched (e.g. the same thing on another event loop)."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    family: str = ""
    hatched: bool = False


@dataclass
class Panel:
    """One subplot: horizontal bars in the order given, and dashed reference lines (label, value)."""

    title: str
    unit: str
    bars: list[Bar]
    lines: list[tuple[str, float]] = field(default_factory=list)


def fmt_value(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def draw(path: Path, title: str, panels: Sequence[Panel], footnote: str = "") -> str | None:
    """Draw the panels in a grid of two columns into the PNG `path`.

    Returns None, or why nothing was drawn.  Every panel should have the same bar
    labels in the same order: the rows share one axis of labels.  Bars are
    coloured by family; the labels say what they are, so there is no legend.
    """
    if not panels:
        return "nothing to draw"
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib, or pip install -e '.[bench]')"

    ncols = 1 if len(panels) == 1 else 2
    nrows = math.ceil(len(panels) / ncols)
    nbars = max(len(p.bars) for p in panels)
    width = max(10.0, 7.0 * ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 1.4 + (0.32 * nbars + 1.0) * nrows),
                             squeeze=False, sharey=True)
    families: dict[str, str] = {}
    for p in panels:
        for b in p.bars:
            families.setdefault(b.family, PALETTE[len(families) % len(PALETTE)])

    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        draw_panel(ax, panels[i], families)

    chars = int(width * 12)  # about what fits in a line at these font sizes
    title_lines = textwrap.wrap(title, chars)
    fig.suptitle("\n".join(title_lines), fontsize=10)
    foot_lines = textwrap.wrap(footnote, int(chars * 1.4)) if footnote else []
    if foot_lines:
        fig.text(0.01, 0.005, "\n".join(foot_lines), fontsize=7, color="#555555", va="bottom")
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.05 + 0.13 * len(foot_lines)) / height, 1,
                           1 - (0.1 + 0.18 * len(title_lines)) / height))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def draw_panel(ax: Any, panel: Panel, families: dict[str, str]) -> None:
    ys = range(len(panel.bars))
    values = [b.value or 0.0 for b in panel.bars]
    top = max([*values, *(b.high or 0.0 for b in panel.bars), *(v for _, v in panel.lines), 1e-9])
    for y, b, v in zip(ys, panel.bars, values, strict=True):
        ax.barh(y, v, color=families[b.family], edgecolor="black", linewidth=0.4,
                hatch="///" if b.hatched else None)
        if b.value is not None and b.low is not None and b.high is not None:
            ax.errorbar(v, y, xerr=[[v - b.low], [b.high - v]], color="black", linewidth=0.8, capsize=2)
        ax.text((b.high or v) + top * 0.01, y, fmt_value(b.value) if b.value is not None else "failed",
                va="center", fontsize=7, bbox=LABEL_BOX)
    for k, (label, value) in enumerate(panel.lines):
        ax.axvline(value, color="black", linestyle=("--", ":", "-.")[k % 3], linewidth=0.9)
        ax.text(value, -0.8 - 0.6 * k, f" {label}", fontsize=7, va="center")
    ax.set_yticks(list(ys), [b.label for b in panel.bars], fontsize=8)
    ax.set_ylim(len(panel.bars) - 0.5, -1.0 - 0.6 * len(panel.lines))  # first bar on top, room for lines
    ax.set_xlim(0, top * 1.18)
    ax.set_xlabel(panel.unit, fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(panel.title, fontsize=9)
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
