"""The card's charts as inline SVG: text and shapes only, no script, no fonts to fetch; they scale, print and
open in any browser. Every text drawn is the caller's, escaped here (`text`): a label `<script>` is drawn as
those characters.

Bounds: a chart draws at most MAX_BARS bars, MAX_CELLS heatmap cells and MAX_POINTS points (the callers cap what
they pass and say so beside the chart), so a chart's size never grows with the dataset.
"""

from __future__ import annotations

import html

from shardsmith.printable import shown

MAX_BARS = 60
MAX_CELLS = 60 * 60
MAX_POINTS = 2_000
BAR_COLOUR = "#4363d8"
LABEL_WIDTH = 170  # pixels for the text beside a bar


def text(value: object) -> str:
    """`value` as HTML/SVG text: characters a person would not see as themselves escaped as Python writes them
    (shardsmith.printable), then HTML's special characters."""
    return html.escape(shown(value), quote=True)


def _clip(value: str, width: int = 28) -> str:
    return value if len(value) <= width else value[: width - 1] + "\u2026"


def bar_chart(bars: list[tuple[str, int]], title: str) -> str:
    """Horizontal bars, one per (name, count), longest scaled to the chart's width; at most MAX_BARS."""
    bars = bars[:MAX_BARS]
    top = max((count for _, count in bars), default=0) or 1
    row, width = 18, 360
    height = row * len(bars) + 8
    parts = [f'<svg class="chart" role="img" width="{LABEL_WIDTH + width + 70}" height="{height}" '
             f'viewBox="0 0 {LABEL_WIDTH + width + 70} {height}"><title>{text(title)}</title>']
    for i, (name, count) in enumerate(bars):
        y = 4 + i * row
        length = max(1, round(width * count / top)) if count else 0
        parts.append(f'<text x="{LABEL_WIDTH - 6}" y="{y + 13}" text-anchor="end">{text(_clip(name))}</text>'
                     f'<rect x="{LABEL_WIDTH}" y="{y + 2}" width="{length}" height="{row - 5}" fill="{BAR_COLOUR}">'
                     f'<title>{text(name)}: {count:,}</title></rect>'
                     f'<text x="{LABEL_WIDTH + length + 5}" y="{y + 13}">{count:,}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap(rows: list[str], columns: list[str], counts: list[list[int]], title: str) -> str:
    """Cells shaded by count (darker: more), rows x columns at most MAX_CELLS; each cell's count in its tooltip."""
    cell = max(6, min(22, 700 // max(1, len(columns))))
    left, head = 110, 100
    top = max((max(r, default=0) for r in counts), default=0) or 1
    width, height = left + cell * len(columns) + 10, head + cell * len(rows) + 10
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
             f'<title>{text(title)}</title>']
    for c, name in enumerate(columns):
        x = left + c * cell + cell // 2
        parts.append(f'<text x="{x}" y="{head - 4}" transform="rotate(-60 {x} {head - 4})" '
                     f'font-size="10">{text(_clip(name, 16))}</text>')
    for r, name in enumerate(rows):
        y = head + r * cell
        parts.append(f'<text x="{left - 4}" y="{y + cell - 3}" text-anchor="end" font-size="10">{text(name)}</text>')
        for c, count in enumerate(counts[r]):
            shade = 0.06 + 0.94 * count / top if count else 0.0
            parts.append(f'<rect x="{left + c * cell}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="{BAR_COLOUR}" fill-opacity="{shade:.2f}" stroke="#ddd" stroke-width="0.5">'
                         f'<title>{text(name)} / {text(columns[c])}: {count:,}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def scatter(values: list[int], num_labels: int, title: str) -> str:
    """Label id (y) against read position (x) for up to MAX_POINTS values: stripes mean label runs, an even
    scatter means mixed records."""
    values = values[:MAX_POINTS]
    width, height, pad = 640, 220, 30
    span_x, span_y = max(1, len(values) - 1), max(1, num_labels - 1)
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
             f'<title>{text(title)}</title>'
             f'<rect x="{pad}" y="6" width="{width - pad - 6}" height="{height - pad - 6}" fill="none" stroke="#999"/>'
             f'<text x="{pad}" y="{height - 8}" font-size="10">read position 0</text>'
             f'<text x="{width - 6}" y="{height - 8}" font-size="10" text-anchor="end">{len(values):,}</text>'
             f'<text x="4" y="14" font-size="10">id {num_labels - 1}</text>']
    plot_w, plot_h = width - pad - 12, height - pad - 14
    for position, label in enumerate(values):
        x = pad + 3 + plot_w * position / span_x
        y = 9 + plot_h * (1 - label / span_y)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.6" fill="{BAR_COLOUR}" fill-opacity="0.6"/>')
    parts.append("</svg>")
    return "".join(parts)
