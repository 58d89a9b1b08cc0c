"""Charts for the HTML report as inline SVG, written directly (no network, no JavaScript, no plotting stack:
`diagnose analyze` on a big trace should cost its parsing, not a plotting library's start-up)."""
from __future__ import annotations

import math
from html import escape
from typing import Optional, Sequence

from diagnose.formatting import fmt_gib
from diagnose.model import Verdict

COLORS = {"data_wait": "#e4572e", "h2d": "#f3a712", "compute": "#29335c", "communication": "#669bbc",
          "host_overhead": "#a8c686", "other": "#b5b5b5"}
LABELS = {"data_wait": "data wait", "h2d": "host-to-device", "compute": "compute", "communication": "communication",
          "host_overhead": "host overhead", "other": "other"}
SERIES_COLORS = ("#29335c", "#e4572e", "#669bbc", "#f3a712", "#a8c686")
VERDICT_COLORS = {Verdict.FASTER: "#1e8449", Verdict.SLOWER: "#c0392b", Verdict.NO_CHANGE: "#7f8c8d",
                  Verdict.FLAGGED: "#d35400", Verdict.UNDECIDED: "#b7950b"}
# the speedup axis's ticks, most telling first: one drawn only where its label clears those already drawn
SPEEDUP_TICKS = (1, 2, 10, 0.5, 5, 100, 20, 50, 0.1, 3, 1.5, 0.25, 1.25, 0.75)
CHAR_PX = 6.6  # an 11 px system-ui glyph at its widest (digits, x, s): labels are spaced by this estimate
TICK_GAP_PX = 4.0
WIDTH = 720
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


class Canvas:
    """An SVG drawing with a plot area [left, right] x [top, bottom] in pixels."""

    def __init__(self, height: int, left: int = 50, right: int = WIDTH - 15, top: int = 10,
                 bottom: Optional[int] = None):
        self.height, self.left, self.right, self.top = height, left, right, top
        self.bottom = bottom if bottom is not None else height - 45
        self.parts: list[str] = []
        self.tick_boxes: list[tuple[float, float, float, float]] = []  # axis labels drawn: (x0, x1, y0, y1)

    def tick(self, x: float, y: float, text: str, anchor: str = "middle") -> bool:
        """An axis label, drawn only where it overlaps no other axis label (False: left out)."""
        width = CHAR_PX * len(text)
        x0 = {"middle": x - width / 2, "end": x - width, "start": x}[anchor]
        box = (x0 - TICK_GAP_PX / 2, x0 + width + TICK_GAP_PX / 2, y - 11, y + 2)
        if any(box[0] < b[1] and b[0] < box[1] and box[2] < b[3] and b[2] < box[3] for b in self.tick_boxes):
            return False
        self.tick_boxes.append(box)
        self.parts.append(f'<text class="tick" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="#555">'
                          f'{escape(text)}</text>')
        return True

    def rect(self, x: float, y: float, w: float, h: float, color: str, title: str = "", opacity: float = 1.0) -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
                          f'fill="{color}" fill-opacity="{opacity}">{tip}</rect>')

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str = "#6b6b70", dash: bool = False,
             width: float = 1.0) -> None:
        style = ' stroke-dasharray="4 3"' if dash else ""
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                          f'stroke-width="{width}"{style}/>')

    def polyline(self, points: list[tuple[float, float]], color: str) -> None:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.3"/>')

    def circle(self, x: float, y: float, color: str) -> None:
        self.parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')

    def text(self, x: float, y: float, text: str, anchor: str = "middle", color: str = "#222") -> None:
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{color}">{escape(text)}</text>')

    def legend(self, items: list[tuple[str, str]], y: float) -> None:
        x = self.left
        for label, color in items:
            self.rect(x, y - 9, 10, 10, color)
            self.text(x + 14, y, label, anchor="start")
            x += 24 + 6.5 * len(label)

    def svg(self, label: str) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {self.height}" width="{WIDTH}" '
                f'height="{self.height}" style="max-width:100%;height:auto" role="img" '
                f'aria-label="{escape(label)}" {FONT}>' + "".join(self.parts)
                + "</svg>")


def _nice_max(value: float) -> float:
    """A round axis maximum at or above value (1, 2, 2.5, 5 x 10^k)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value)


def _y_axis(c: Canvas, top_value: float, unit: str) -> None:
    for k in range(5):
        value = top_value * k / 4
        y = c.bottom - (c.bottom - c.top) * k / 4
        c.line(c.left, y, c.right, y, "#e3e3e6")
        c.tick(c.left - 6, y + 4, f"{value:g}{unit}", anchor="end")


def breakdown_bar(breakdown: dict[str, float]) -> str:
    c = Canvas(70, left=10, right=WIDTH - 10, top=8, bottom=38)
    x, span = c.left, c.right - c.left
    for bucket, frac in breakdown.items():
        if frac <= 0:
            continue
        c.rect(x, c.top, frac * span, c.bottom - c.top, COLORS[bucket], f"{LABELS[bucket]} {frac:.0%}")
        if frac >= 0.06:
            c.text(x + frac * span / 2, (c.top + c.bottom) / 2 + 4, f"{frac:.0%}", color="white")
        x += frac * span
    c.legend([(f"{LABELS[b]} {f:.0%}", COLORS[b]) for b, f in breakdown.items() if f > 0], c.bottom + 22)
    return c.svg("share of step time by bucket")


def steps_chart(durations_ms: Sequence[float], buckets_ms: dict[str, Sequence[float]]) -> str:
    c = Canvas(230)
    top_value = _nice_max(max(durations_ms, default=0.0))
    _y_axis(c, top_value, "")
    c.text(4, (c.top + c.bottom) / 2, "ms", anchor="start", color="#555")
    n = max(len(durations_ms), 1)
    slot = (c.right - c.left) / n
    scale = (c.bottom - c.top) / top_value
    shown = [b for b, values in buckets_ms.items() if any(values)]
    for i in range(len(durations_ms)):
        y = c.bottom
        for bucket in shown:
            height = buckets_ms[bucket][i] * scale
            c.rect(c.left + i * slot + 0.1 * slot, y - height, 0.8 * slot, height, COLORS[bucket],
                   f"step {i}: {LABELS[bucket]} {buckets_ms[bucket][i]:.1f} ms")
            y -= height
        if n <= 40 or i % math.ceil(n / 40) == 0:
            c.tick(c.left + (i + 0.5) * slot, c.bottom + 14, str(i))
    c.text((c.left + c.right) / 2, c.bottom + 28, "profiled step", color="#555")
    c.legend([(LABELS[b], COLORS[b]) for b in shown], c.height - 4)
    return c.svg("time per profiled step by bucket")


def utilization_chart(t_s: Sequence[float], series: dict[str, Sequence[Optional[float]]],
                      window: Optional[tuple[float, float]], ylabel: str) -> str:
    c = Canvas(210)
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = _nice_max(max(values, default=1.0))
    _y_axis(c, top_value, "")
    c.text(c.left, c.top - 1, ylabel, anchor="start", color="#555")
    t0, t1 = (min(t_s), max(t_s)) if t_s else (0.0, 1.0)
    span = (t1 - t0) or 1.0

    def x_of(t: float) -> float:
        return c.left + (t - t0) / span * (c.right - c.left)

    if window:
        c.rect(x_of(window[0]), c.top, x_of(window[1]) - x_of(window[0]), c.bottom - c.top, "#29335c",
               "profiled window", opacity=0.08)
    legend = []
    for (label, points), color in zip(series.items(), SERIES_COLORS):
        line = [(x_of(t), c.bottom - v / top_value * (c.bottom - c.top)) for t, v in zip(t_s, points) if v is not None]
        if line:
            c.polyline(line, color)
            legend.append((label, color))
    for k in range(5):
        t = t0 + span * k / 4
        c.tick(x_of(t), c.bottom + 14, f"{t:.1f}")
    c.text((c.left + c.right) / 2, c.bottom + 28, "seconds since start", color="#555")
    c.legend(legend + ([("profiled window", "#d9dbe4")] if window else []), c.height - 4)
    return c.svg(ylabel)


def speedup_chart(labels: Sequence[str], speedups: Sequence[float], cis: Sequence[Optional[tuple[float, float]]],
                  verdicts: Sequence[str]) -> str:
    """Each speedup with its interval on a log axis (2x and 0.5x are equally far from 1.0), first on top."""
    row = 24
    c = Canvas(40 + row * len(labels), left=260, top=8)
    c.bottom = c.top + row * len(labels)
    low = min([1.0, *speedups, *(ci[0] for ci in cis if ci)]) / 1.15
    high = max([1.0, *speedups, *(ci[1] for ci in cis if ci)]) * 1.15

    def x_of(value: float) -> float:
        return c.left + (math.log(value) - math.log(low)) / (math.log(high) - math.log(low)) * (c.right - c.left)

    for tick in (t for t in SPEEDUP_TICKS if low <= t <= high):
        if c.tick(x_of(tick), c.bottom + 14, f"{tick:g}x"):
            c.line(x_of(tick), c.top, x_of(tick), c.bottom, "#e3e3e6")
    c.line(x_of(1.0), c.top, x_of(1.0), c.bottom, dash=True)
    for i, (label, speedup, ci, verdict) in enumerate(zip(labels, speedups, cis, verdicts)):
        y = c.top + row * (i + 0.5)
        color = VERDICT_COLORS.get(verdict, "#29335c")
        lo, hi = ci if ci else (speedup, speedup)
        c.line(x_of(lo), y, x_of(hi), y, color, width=2)
        for end in (lo, hi):
            c.line(x_of(end), y - 5, x_of(end), y + 5, color, width=2)
        c.circle(x_of(speedup), y, color)
        c.text(c.left - 8, y + 4, label, anchor="end")
    c.text((c.left + c.right) / 2, c.bottom + 30, "speedup over the baseline (99% interval)", color="#555")
    return c.svg("speedup over the baseline (99% interval)")


def phases_chart(phases: Sequence[str], launches: Sequence[float], gpu_ms: Sequence[float]) -> str:
    """Per phase of the step: GPU launches (left) and GPU time (right), each on its own scale."""
    row, gap = 24, 20
    c = Canvas(44 + row * len(phases), left=90, top=8)
    c.bottom = c.top + row * len(phases)
    half = (c.right - c.left - gap) / 2
    panels = ((c.left, launches, "launches per step", "#669bbc", "{:.0f}"),
              (c.left + half + gap, gpu_ms, "GPU ms per step", "#29335c", "{:.1f}"))
    for x0, values, title, color, fmt in panels:
        top_value = max(max(values, default=0.0), 1e-9)
        for i, value in enumerate(values):
            y = c.top + row * i + 4
            width = value / top_value * (half - 40)
            c.rect(x0, y, width, row - 8, color, f"{phases[i]}: {fmt.format(value)} {title}")
            c.text(x0 + width + 4, y + row / 2, fmt.format(value), anchor="start", color="#555")
        c.text(x0 + half / 2, c.bottom + 16, title, color="#555")
    for i, phase in enumerate(phases):
        c.text(c.left - 8, c.top + row * (i + 0.5) + 4, phase, anchor="end")
    return c.svg("GPU launches and GPU time per phase of the step")


def breakdown_pair_chart(a_ms: dict[str, float], b_ms: dict[str, float]) -> str:
    """A's and B's step, each a bar of its buckets in ms on one shared scale: the longer bar is the slower step."""
    c = Canvas(120, left=30, right=WIDTH - 70, top=8, bottom=76)
    scale = (c.right - c.left) / max(sum(a_ms.values()), sum(b_ms.values()), 1e-9)
    for row, (label, buckets) in enumerate((("A", a_ms), ("B", b_ms))):
        y, x = c.top + row * 36, c.left
        c.text(c.left - 8, y + 19, label, anchor="end")
        for bucket, ms in buckets.items():
            if ms > 0:
                c.rect(x, y, ms * scale, 28, COLORS[bucket], f"{label}: {LABELS[bucket]} {ms:.1f} ms")
                x += ms * scale
        c.text(x + 6, y + 19, f"{sum(buckets.values()):.1f} ms", anchor="start", color="#555")
    shown = [b for b in COLORS if a_ms.get(b, 0) > 0 or b_ms.get(b, 0) > 0]
    c.legend([(LABELS[b], COLORS[b]) for b in shown], c.height - 8)
    return c.svg("step time by bucket, A and B (profiled, ms per step)")


MEMORY_COLORS = {"parameters": "#29335c", "gradients": "#669bbc", "optimizer state": "#f3a712",
                 "activations": "#e4572e", "buffers": "#a8c686", "other": "#b5b5b5"}
PHASE_COLORS = {"data": "#e4572e", "forward": "#29335c", "backward": "#669bbc", "optimizer": "#f3a712",
                "other": "#b5b5b5"}


def memory_bar(parts: Sequence[tuple[str, int]], peak: int) -> str:
    """The peak as a stacked bar of its parts."""
    c = Canvas(70, left=10, right=WIDTH - 10, top=8, bottom=38)
    x, span = c.left, c.right - c.left
    for name, size in parts:
        frac = size / peak if peak else 0.0
        if frac <= 0:
            continue
        c.rect(x, c.top, frac * span, c.bottom - c.top, MEMORY_COLORS.get(name, "#b5b5b5"),
               f"{name} {fmt_gib(size)} ({frac:.0%})")
        if frac >= 0.08:
            c.text(x + frac * span / 2, (c.top + c.bottom) / 2 + 4, f"{frac:.0%}", color="white")
        x += frac * span
    c.legend([(f"{name} {fmt_gib(size)}", MEMORY_COLORS.get(name, "#b5b5b5")) for name, size in parts if size > 0],
             c.bottom + 22)
    return c.svg("memory at the peak by part")


def memory_timeline_chart(t_s: Sequence[float], level: Sequence[int], phases: Sequence[str]) -> str:
    """Allocated memory over one step, each stretch coloured by the phase it was made in."""
    c = Canvas(220, left=70)
    top_value = _nice_max(max(level, default=0) / 2**20)
    _y_axis(c, top_value, " MiB")
    end = max(t_s, default=0.0) or 1.0
    xs = [c.left + (c.right - c.left) * t / end for t in t_s]
    ys = [c.bottom - (c.bottom - c.top) * (v / 2**20) / top_value for v in level]
    for i in range(len(xs)):
        width = (xs[i + 1] if i + 1 < len(xs) else c.right) - xs[i]
        c.rect(xs[i], ys[i], max(width, 1.0), c.bottom - ys[i], PHASE_COLORS.get(phases[i], "#b5b5b5"),
               f"{t_s[i] * 1e3:.1f} ms: {fmt_gib(level[i])} ({phases[i]})", opacity=0.85)
    peak = max(range(len(level)), key=level.__getitem__) if level else None
    if peak is not None:
        c.circle(xs[peak], ys[peak], "#c0392b")
    c.text((c.left + c.right) / 2, c.bottom + 16, f"time in the step (0 to {end * 1e3:.1f} ms)", color="#555")
    c.legend([(name, color) for name, color in PHASE_COLORS.items() if name in set(phases)], c.height - 4)
    return c.svg("allocated memory over one step by phase")


def roofline_chart(points: Sequence[tuple[float, float, str, str]], peaks: dict[str, float],
                   bandwidth: float) -> str:
    """Log-log: arithmetic intensity (FLOPs per byte) across, FLOP/s up; each roof the memory slope up to a dtype's
    peak, each op a point (intensity, achieved, label, dtype) in its dtype's colour."""
    c = Canvas(300, left=95, top=10)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + list(peaks.values())
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs + [1.0]))), 10 ** math.ceil(math.log10(max(xs + [10.0]) * 2))
    y_hi = 10 ** math.ceil(math.log10(max(ys) * 1.5))
    y_lo = 10 ** math.floor(math.log10(max(min(ys + [bandwidth * x_lo]), y_hi / 1e7)))

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))
        fy = (math.log10(max(y, y_lo)) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        return c.left + fx * (c.right - c.left), c.bottom - fy * (c.bottom - c.top)

    for k in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x, _ = at(10.0 ** k, y_lo)
        c.line(x, c.top, x, c.bottom, "#e3e3e6")
        c.tick(x, c.bottom + 14, f"{10.0 ** k:g}")
    for k in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        _, y = at(x_lo, 10.0 ** k)
        c.line(c.left, y, c.right, y, "#e3e3e6")
        c.tick(c.left - 6, y + 4, _flops_label(10.0 ** k), anchor="end")
    colors = {dtype: SERIES_COLORS[i % len(SERIES_COLORS)] for i, dtype in enumerate(peaks)}
    for dtype, peak in peaks.items():
        knee = peak / bandwidth
        c.polyline([at(x_lo, bandwidth * x_lo), at(knee, peak), at(x_hi, peak)], colors[dtype])
    for x, y, label, dtype in points:
        px, py = at(x, y)
        c.parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{colors.get(dtype, "#222")}" '
                       f'fill-opacity="0.75"><title>{escape(label)}</title></circle>')
    c.text((c.left + c.right) / 2, c.bottom + 30, "arithmetic intensity (FLOPs per byte moved)", color="#555")
    c.legend([(f"{dtype} roof", color) for dtype, color in colors.items()], c.height - 2)
    return c.svg("roofline: each op's FLOP/s against its arithmetic intensity, under the device's roofs")


def _flops_label(value: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:g} {unit}FLOP/s"
    return f"{value:g} FLOP/s"


def run_cost_chart(labels: Sequence[str], seconds: Sequence[float], cis: Sequence[Optional[tuple[float, float]]],
                   texts: Sequence[str]) -> str:
    """The whole run's time now (first) and with each verified change: a bar each, its interval as a whisker, and
    its time (and cost) written beside it; the axis in the unit that suits the longest."""
    row = 24
    c = Canvas(40 + row * len(labels), left=260, right=WIDTH - 170, top=8)
    c.bottom = c.top + row * len(labels)
    longest = max([*seconds, *(ci[1] for ci in cis if ci)], default=0.0)
    unit, per = next((u, s) for u, s in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1)) if longest >= 2 * s
                     or s == 1)
    top_value = _nice_max(longest / per)

    def x_of(value_s: float) -> float:
        return c.left + value_s / per / top_value * (c.right - c.left)

    parts = 4 if round(top_value / 10 ** math.floor(math.log10(top_value)), 6) == 2 else 5  # round ticks
    for k in range(parts + 1):
        x = c.left + (c.right - c.left) * k / parts
        c.line(x, c.top, x, c.bottom, "#e3e3e6")
        c.tick(x, c.bottom + 14, f"{top_value * k / parts:g} {unit}")
    for i, (label, value, ci, text) in enumerate(zip(labels, seconds, cis, texts)):
        y = c.top + row * i
        c.rect(c.left, y + 4, x_of(value) - c.left, row - 8, "#7f8c8d" if i == 0 else "#1e8449", text)
        if ci:
            c.line(x_of(ci[0]), y + row / 2, x_of(ci[1]), y + row / 2, "#222", width=1.5)
        c.text(c.left - 8, y + row / 2 + 4, label if len(label) <= 40 else label[:39] + "…", anchor="end")
        c.text(max(x_of(value), x_of(ci[1]) if ci else 0) + 6, y + row / 2 + 4, text, anchor="start")
    c.text((c.left + c.right) / 2, c.bottom + 30, "the whole run's time (99% interval)", color="#555")
    return c.svg("the whole run's time now and with each verified change")
