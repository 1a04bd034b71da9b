"""Charts of rates as plain SVG: a y axis from 0 to 100% with ticks and grid lines, labelled
categories, a legend, and room for every label (nothing is clipped). Pure functions of
their data; the report pages inline the result, so they work offline."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from gym_repost.evaluate.report import percent

PALETTE = ("#3b6fc9", "#d9822b", "#2e9e6a", "#b8455b", "#7d5bb5", "#7a7a7a", "#c2a01d", "#3aa3b5")
"""Series colours, in order (distinguishable, also in grey print)."""

_FONT = 12
_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Series:
    """One named line or set of bars; ``None`` where a value is missing."""

    name: str
    values: Sequence[float | None]


def _text_width(text: str, size: float = _FONT) -> float:
    return len(text) * 0.62 * size


@dataclass(frozen=True)
class _Frame:
    """The plot area inside the SVG, and how values map to it."""

    left: float
    top: float
    width: float
    height: float

    def y(self, value: float) -> float:
        return self.top + self.height * (1.0 - max(0.0, min(1.0, value)))


def _frame_svg(title: str, frame: _Frame, total_w: float, total_h: float, x_label: str, y_label: str) -> list[str]:
    """The SVG's opening, title, y axis (ticks, grid, label) and x axis line and label."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" role="img" aria-label="{html.escape(title)}" '
        f'font-family="sans-serif" font-size="{_FONT}">',
        f'<text x="8" y="18" font-size="{_FONT + 2}" font-weight="bold">{html.escape(title)}</text>',
    ]
    for tick in _TICKS:
        y = frame.y(tick)
        out.append(
            f'<line x1="{frame.left:.1f}" y1="{y:.1f}" x2="{frame.left + frame.width:.1f}" y2="{y:.1f}" '
            f'stroke="{"#888" if tick == 0 else "#e3e3e3"}"/>'
        )
        out.append(
            f'<text x="{frame.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{100 * tick:.0f}%</text>'
        )
    out.append(
        f'<line x1="{frame.left:.1f}" y1="{frame.top:.1f}" x2="{frame.left:.1f}" '
        f'y2="{frame.top + frame.height:.1f}" stroke="#888"/>'
    )
    mid_y = frame.top + frame.height / 2
    out.append(
        f'<text x="14" y="{mid_y:.1f}" text-anchor="middle" transform="rotate(-90 14 {mid_y:.1f})" '
        f'fill="#444">{html.escape(y_label)}</text>'
    )
    out.append(
        f'<text x="{frame.left + frame.width / 2:.1f}" y="{frame.top + frame.height + 36:.1f}" '
        f'text-anchor="middle" fill="#444">{html.escape(x_label)}</text>'
    )
    return out


def _legend(series: Sequence[Series], x: float, y: float) -> list[str]:
    out = []
    for i, s in enumerate(series):
        out.append(f'<rect x="{x:.1f}" y="{y + 18 * i - 9:.1f}" width="11" height="11" fill="{PALETTE[i % 8]}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y + 18 * i + 1:.1f}">{html.escape(s.name)}</text>')
    return out


def _layout(
    title: str, categories: Sequence[str], series: Sequence[Series], slot: float, x_label: str
) -> tuple[_Frame, float, float]:
    """The plot frame and the SVG's size: wide enough for the title, the categories, the
    x axis's label and the legend (on the right when there are several series)."""
    legend_w = max((_text_width(s.name) for s in series), default=0) + 30 if len(series) > 1 else 0
    plot_w = max(slot * max(1, len(categories)), 160, _text_width(x_label) + 8)
    left, top, bottom = 52.0, 34.0, 46.0
    total_w = max(left + plot_w + legend_w + 16, _text_width(title, _FONT + 2) + 24)
    height = 190.0
    return _Frame(left, top, plot_w, height), total_w, top + height + bottom


def bar_chart(title: str, categories: Sequence[str], series: Sequence[Series], *, x_label: str = "") -> str:
    """Grouped bars of rates in [0, 1], one group per category, one bar per series; each
    bar labelled with its value (``n/a`` for a missing one)."""
    per_group = max(1, len(series))
    bar_w = _text_width("100.0%", _FONT - 2) + 6  # room for the value above each bar
    slot = max(per_group * bar_w + 24, max((_text_width(c) for c in categories), default=0) + 12)
    frame, total_w, total_h = _layout(title, categories, series, slot, x_label)
    out = _frame_svg(title, frame, total_w, total_h, x_label, "pass rate")
    for ci, category in enumerate(categories):
        group_x = frame.left + ci * slot + (slot - per_group * bar_w) / 2
        for si, s in enumerate(series):
            value = s.values[ci] if ci < len(s.values) else None
            x = group_x + si * bar_w
            if value is not None:
                y = frame.y(value)
                out.append(
                    f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" '
                    f'height="{frame.top + frame.height - y:.1f}" fill="{PALETTE[si % 8]}">'
                    f"<title>{html.escape(s.name)}, {html.escape(category)}: {percent(value)}</title></rect>"
                )
            label_y = frame.y(value or 0.0) - 4
            out.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{label_y:.1f}" text-anchor="middle" '
                f'font-size="{_FONT - 2}">{percent(value)}</text>'
            )
        out.append(
            f'<text x="{frame.left + ci * slot + slot / 2:.1f}" y="{frame.top + frame.height + 16:.1f}" '
            f'text-anchor="middle">{html.escape(category)}</text>'
        )
    if len(series) > 1:
        out += _legend(series, frame.left + frame.width + 16, frame.top + 8)
    out.append("</svg>")
    return "".join(out)


def line_chart(title: str, xs: Sequence[str], series: Sequence[Series], *, x_label: str = "") -> str:
    """Lines of rates in [0, 1] over the categories ``xs`` (repairs 0, 1, ...), with a
    marker and its value at every point; a missing value breaks the line."""
    slot = max(48.0, max((_text_width(x) for x in xs), default=0) + 12)
    frame, total_w, total_h = _layout(title, xs, series, slot, x_label)
    slot = frame.width / max(1, len(xs))  # the categories spread over the whole axis
    out = _frame_svg(title, frame, total_w, total_h, x_label, "pass rate")
    for xi, label in enumerate(xs):
        out.append(
            f'<text x="{frame.left + xi * slot + slot / 2:.1f}" y="{frame.top + frame.height + 16:.1f}" '
            f'text-anchor="middle">{html.escape(label)}</text>'
        )
    for si, s in enumerate(series):
        colour = PALETTE[si % 8]
        points = [
            (frame.left + xi * slot + slot / 2, frame.y(v), v)
            for xi, v in enumerate(s.values[: len(xs)])
            if v is not None
        ]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
            width = 2 + 2.5 * (len(series) - 1 - si)  # earlier lines wider: equal series stay visible
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}"/>')
        for x, y, v in points:
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">'
                f"<title>{html.escape(s.name)}: {percent(v)}</title></circle>"
            )
            if len(series) == 1:
                out.append(
                    f'<text x="{x:.1f}" y="{y - 8:.1f}" text-anchor="middle" '
                    f'font-size="{_FONT - 1}">{percent(v)}</text>'
                )
    if len(series) > 1:
        out += _legend(series, frame.left + frame.width + 16, frame.top + 8)
    out.append("</svg>")
    return "".join(out)
