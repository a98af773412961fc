"""Inline SVG charts drawn in Python, so a report is one file that needs no script or network.

Every chart takes values that may be None (a metric undefined for a model): a scatter skips the
point, a line breaks, a bar becomes a grey mark; the caller reports what was left out. Text is
escaped here, so callers pass raw model and task names.
"""

from __future__ import annotations

import colorsys
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Colours for the first 20 models, picked greedily in CIELAB so that each is as far as possible (CIEDE2000)
# from the others and from the page's white, text and grid greys, at lightness 35-72 (visible on white):
# any two of the first 14 are at least 23 apart, two that share a marker shape at least 33. Later
# models get golden-angle hues.
PALETTE = (
    "#a59600", "#785a1e", "#006900", "#d296ff", "#c30000", "#00c3b4", "#8700ff", "#0069a5",
    "#785a69", "#ff9600", "#ff8778", "#0fc300", "#ff0087", "#00b4ff", "#6987ff", "#a50078",
    "#e196b4", "#b4784b", "#789669", "#007878",
)
# Marker shapes, cycled against the colours so that neighbouring models differ in both.
SHAPES = ("circle", "square", "triangle", "diamond", "down")
AXIS, GRID, MUTED = "#444444", "#e3e3e3", "#999999"
CHAR_W = 6.3  # average width of an 11px sans-serif character, for label layout


def colour(i: int) -> str:
    if i < len(PALETTE):
        return PALETTE[i]
    r, g, b = colorsys.hls_to_rgb((i * 0.618034) % 1.0, 0.45, 0.7)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


@dataclass(frozen=True)
class Style:
    """How one model is drawn everywhere on a page: bars by colour, points by colour and shape."""

    colour: str
    shape: str = "circle"


def style(i: int) -> Style:
    return Style(colour(i), SHAPES[i % len(SHAPES)])


def marker(shape: str, x: float, y: float, r: float, fill: str, extra: str = "", tip: str = "") -> str:
    """A marker of about the area of a circle of radius r centred on (x, y)."""
    tip = f"<title>{esc(tip)}</title>" if tip else ""
    if shape == "circle":
        return f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" fill="{fill}"{extra}>{tip}</circle>'
    if shape == "square":
        h = r * 0.886  # half the side of a square as large as the circle
        corners = [(x - h, y - h), (x + h, y - h), (x + h, y + h), (x - h, y + h)]
    elif shape == "diamond":
        h = r * 1.253
        corners = [(x, y - h), (x + h, y), (x, y + h), (x - h, y)]
    else:  # an equilateral triangle, pointing up or ("down") down
        a, sign = r * 2.694, (1 if shape == "triangle" else -1)
        corners = [(x, y - sign * a / 1.732), (x + a / 2, y + sign * a / 3.464), (x - a / 2, y + sign * a / 3.464)]
    points = " ".join(f"{_num(cx)},{_num(cy)}" for cx, cy in corners)
    return f'<polygon points="{points}" fill="{fill}"{extra}>{tip}</polygon>'


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _tick(v: float) -> str:
    return f"{round(v, 4):g}"


@dataclass(frozen=True)
class StyledPoint:
    label: str
    x: float | None
    y: float | None
    style: Style


@dataclass(frozen=True)
class StyledSeries:
    name: str
    style: Style
    values: Sequence[float | None]  # one per category
    intervals: Sequence[tuple[float, float] | None] = ()  # a 95% interval per category: a whisker on its bar


@dataclass(frozen=True)
class _Frame:
    """Plot area inside an SVG of width x height; maps data to pixels."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    y_max: float

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    def py(self, v: float) -> float:
        return self.top + self.plot_h * (1 - min(max(v, 0.0), self.y_max) / self.y_max)

    def y_axis(self, label: str) -> list[str]:
        out = []
        for i in range(5):
            v = self.y_max * i / 4
            y = self.py(v)
            out.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{_num(y)}" y2="{_num(y)}" '
                       f'stroke="{GRID}"/>')
            out.append(f'<text x="{self.left - 6}" y="{_num(y + 4)}" text-anchor="end" class="tick">{_tick(v)}</text>')
        mid = self.top + self.plot_h / 2
        out.append(f'<text x="12" y="{_num(mid)}" transform="rotate(-90 12 {_num(mid)})" text-anchor="middle" '
                   f'class="axis">{esc(label)}</text>')
        out.append(f'<line x1="{self.left}" x2="{self.left}" y1="{self.top}" y2="{_num(self.top + self.plot_h)}" '
                   f'stroke="{AXIS}"/>')
        out.append(f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{_num(self.top + self.plot_h)}" '
                   f'y2="{_num(self.top + self.plot_h)}" stroke="{AXIS}"/>')
        return out


def _y_max(values: Sequence[float | None]) -> float:
    """Rates live in [0, 1]; a larger value (should one appear) stretches the axis."""
    present = [v for v in values if v is not None]
    return max([1.0, *present])


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{esc(title)}"><text x="{width / 2:.0f}" y="16" text-anchor="middle" class="title">'
            f'{esc(title)}</text>' + "".join(body) + "</svg>")


def _nice_max(values: Sequence[float | None]) -> float:
    """The smallest round axis end at or above every value, so clustered rates spread out."""
    hi = max([v for v in values if v is not None], default=0.0)
    return next((m for m in (0.1, 0.2, 0.4, 0.6, 0.8, 1.0) if hi <= m), float(math.ceil(hi)))


Box = tuple[float, float, float, float]
MAX_LABELLED = 60  # points a scatter labels; more are named by the legend and their tooltips


def _overlap(a: Box, b: Box) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


# Where a label may go, nearest first: beside its point, then further out along a leader line.
_OFFSETS = sorted(((dx, dy) for dx in (9, 36, 72) for dy in range(-120, 121, 12)),
                  key=lambda o: (o[0] + abs(o[1]), o[1] > 0))


def _place(x: float, y: float, w: float, taken: list[Box], bounds: Box) -> tuple[Box, bool] | None:
    """The nearest box for a label of width w, right or left of (x, y), that overlaps nothing
    taken and stays inside bounds, and whether it left the point's side; None when there is
    none (the legend names the point)."""
    for dx, dy in _OFFSETS:
        for x0 in (x + dx, x - dx - w):
            box = (x0, y + dy - 9, x0 + w, y + dy + 3)
            inside = bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]
            if inside and not any(_overlap(box, t) for t in taken):
                return box, (dx, dy) != _OFFSETS[0]
    return None


def scatter(points: Sequence[StyledPoint], title: str, x_label: str, y_label: str,
            width: int = 600, height: int = 420) -> str:
    """Points on axes that zoom to the data, each labelled where its label fits without touching
    another label or point (a label moved away from its point gets a thin leader line); the
    page's legend, by shape and colour, names every point, labelled or not. Beyond
    ``MAX_LABELLED`` points none is labelled: a chart that size has no room for labels, and
    placing them costs the square of the points (each against every box taken)."""
    drawn = [(p, p.x, p.y) for p in points if p.x is not None and p.y is not None]
    f = _Frame(width, height, 52, 16, 28, 44, _nice_max([y for _, _, y in drawn]))
    x_max = _nice_max([x for _, x, _ in drawn])
    body = f.y_axis(y_label)
    for i in range(5):
        v = x_max * i / 4
        x = f.left + f.plot_w * v / x_max
        body.append(f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{f.top}" y2="{_num(f.top + f.plot_h)}" stroke="{GRID}"/>')
        body.append(f'<text x="{_num(x)}" y="{_num(f.top + f.plot_h + 15)}" text-anchor="middle" class="tick">'
                    f'{_tick(v)}</text>')
    body.append(f'<text x="{_num(f.left + f.plot_w / 2)}" y="{height - 8}" text-anchor="middle" class="axis">'
                f'{esc(x_label)}</text>')
    xy = [(p, f.left + f.plot_w * min(max(px, 0.0), x_max) / x_max, f.py(py)) for p, px, py in drawn]
    taken: list[Box] = [(x - 8, y - 8, x + 8, y + 8) for _, x, y in xy]
    bounds = (float(f.left), float(f.top), float(width - f.right), float(f.top + f.plot_h))
    labels: list[str] = []
    for p, x, y in sorted(xy, key=lambda t: (t[1], t[2])) if len(xy) <= MAX_LABELLED else []:
        text = _short(p.label, 26)
        placed = _place(x, y, CHAR_W * len(text) + 2, taken, bounds)
        if placed is None:
            continue
        box, moved = placed
        taken.append(box)
        if moved:
            lx = box[0] if box[0] > x else box[2]
            labels.append(f'<line x1="{_num(x)}" y1="{_num(y)}" x2="{_num(lx)}" y2="{_num(box[3] - 4)}" '
                          f'stroke="{MUTED}" stroke-width="0.8"/>')
        labels.append(f'<text x="{_num(box[0] + 1)}" y="{_num(box[3] - 1)}" class="label">{esc(text)}</text>')
    for (p, x, y), (_, px, py) in zip(xy, drawn):
        body.append(marker(p.style.shape, x, y, 6, p.style.colour, ' stroke="#ffffff" stroke-width="1.5"',
                           f"{p.label}: x {px:.3f}, y {py:.3f}"))
    return _svg(width, height, title, body + labels)


def line_chart(categories: Sequence[str], series: Sequence[StyledSeries], title: str, x_label: str, y_label: str,
               width: int = 560, height: int = 320) -> str:
    """One line per series over categorical x; a None value breaks the line, markers show every value."""
    f = _Frame(width, height, 52, 16, 28, 44, _y_max([v for s in series for v in s.values]))
    step = f.plot_w / max(len(categories), 1)
    xs = [f.left + step * (i + 0.5) for i in range(len(categories))]
    body = f.y_axis(y_label)
    for x, c in zip(xs, categories):
        body.append(f'<text x="{_num(x)}" y="{_num(f.top + f.plot_h + 15)}" text-anchor="middle" class="tick">'
                    f'{esc(_short(c, 10))}</text>')
    body.append(f'<text x="{_num(f.left + f.plot_w / 2)}" y="{height - 8}" text-anchor="middle" class="axis">'
                f'{esc(x_label)}</text>')
    for s in series:
        run: list[str] = []
        for x, v in [*zip(xs, s.values), (0.0, None)]:  # the sentinel flushes the last segment
            if v is None:
                if len(run) > 1:
                    body.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{s.style.colour}" '
                                f'stroke-width="2"/>')
                run = []
            else:
                run.append(f"{_num(x)},{_num(f.py(v))}")
        for x, c, v in zip(xs, categories, s.values):
            if v is not None:
                body.append(marker(s.style.shape, x, f.py(v), 4, s.style.colour, tip=f"{s.name}, {c}: {v:.3f}"))
    return _svg(width, height, title, body)


def grouped_bars(groups: Sequence[str], series: Sequence[StyledSeries], title: str, y_label: str,
                 width: int = 1100, height: int = 360) -> str:
    """Per group, one bar per series side by side; a None value is a grey dash on the axis."""
    longest = max((len(g) for g in groups), default=0)
    group_w = (width - 52 - 16) / max(len(groups), 1)
    tilt = CHAR_W * longest > group_w - 4
    bottom = 30 + (int(5.6 * min(longest, 28) * 0.5) if tilt else 0)  # sin 30° of a 10px label
    highs = [iv[1] for s in series for iv in s.intervals if iv is not None]
    f = _Frame(width, height + (bottom - 30), 52, 16, 28, bottom, _y_max([*(v for s in series for v in s.values),
                                                                          *highs]))
    bar_w = max(1.0, min(18.0, (group_w - 10) / max(len(series), 1)))
    body = f.y_axis(y_label)
    base = f.top + f.plot_h
    for gi, g in enumerate(groups):
        gx = f.left + group_w * gi + (group_w - bar_w * len(series)) / 2
        for si, s in enumerate(series):
            x, v = gx + bar_w * si, s.values[gi]
            if v is None:
                body.append(f'<rect x="{_num(x)}" y="{_num(base - 2)}" width="{_num(bar_w)}" height="2" fill="{MUTED}">'
                            f'<title>{esc(s.name)}, {esc(g)}: no value</title></rect>')
                continue
            y = f.py(v)
            interval = s.intervals[gi] if gi < len(s.intervals) else None
            shown = "" if interval is None else f" (95% interval {interval[0]:.3f} to {interval[1]:.3f})"
            body.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(bar_w)}" height="{_num(base - y)}" '
                        f'fill="{s.style.colour}"><title>{esc(s.name)}, {esc(g)}: {v:.3f}{shown}</title></rect>')
            if interval is not None:
                mid, lo, hi = x + bar_w / 2, f.py(max(interval[0], 0.0)), f.py(interval[1])
                body.append(f'<path d="M{_num(mid)} {_num(lo)}V{_num(hi)}M{_num(mid - bar_w / 4)} {_num(hi)}'
                            f'h{_num(bar_w / 2)}" stroke="{AXIS}" stroke-width="1" fill="none"/>')
        cx = f.left + group_w * (gi + 0.5)
        label = esc(_short(g, 28))
        if tilt:
            body.append(f'<text x="{_num(cx)}" y="{_num(base + 14)}" text-anchor="end" class="tick" '
                        f'transform="rotate(-30 {_num(cx)} {_num(base + 14)})">{label}</text>')
        else:
            body.append(f'<text x="{_num(cx)}" y="{_num(base + 15)}" text-anchor="middle" class="tick">{label}</text>')
    return _svg(width, f.height, title, body)


def legend(entries: Sequence[tuple[str, Style]]) -> str:
    """Each model's marker (its shape in its colour) and name, as HTML shared by a section's charts."""
    items = "".join(f'<li><svg class="key" width="14" height="14" viewBox="0 0 14 14">'
                    f'{marker(st.shape, 7, 7, 5.5, st.colour)}</svg>{esc(n)}</li>' for n, st in entries)
    return f'<ul class="legend">{items}</ul>'
