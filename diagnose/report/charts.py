"""Charts for the HTML report, drawn by matplotlib as inline SVG (no network, no JavaScript)."""
from __future__ import annotations

import io
from typing import Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                     "svg.hashsalt": "diagnose"})

COLORS = {"data_wait": "#e4572e", "h2d": "#f3a712", "compute": "#29335c", "communication": "#669bbc",
          "host_overhead": "#a8c686", "other": "#b5b5b5"}
LABELS = {"data_wait": "data wait", "h2d": "host-to-device", "compute": "compute", "communication": "communication",
          "host_overhead": "host overhead", "other": "other"}


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG goes inline


def breakdown_bar(breakdown: dict[str, float]) -> str:
    fig, ax = plt.subplots(figsize=(7.5, 1.3))
    left = 0.0
    for bucket, frac in breakdown.items():
        if frac <= 0:
            continue
        ax.barh([0], [frac], left=left, color=COLORS[bucket], label=f"{LABELS[bucket]} {frac:.0%}")
        if frac >= 0.06:
            ax.text(left + frac / 2, 0, f"{frac:.0%}", ha="center", va="center", color="white", fontsize=9)
        left += frac
    ax.set_xlim(0, 1)
    ax.set_yticks([])
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.35), frameon=False, fontsize=8)
    return _svg(fig)


def steps_chart(durations_ms: Sequence[float], buckets_ms: dict[str, Sequence[float]]) -> str:
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    x = list(range(len(durations_ms)))
    bottom = [0.0] * len(x)
    for bucket, values in buckets_ms.items():
        if not any(values):
            continue
        ax.bar(x, values, bottom=bottom, color=COLORS[bucket], label=LABELS[bucket], width=0.8)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("profiled step")
    ax.set_ylabel("ms")
    ax.set_xticks(x)
    ax.legend(ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False, fontsize=8)
    return _svg(fig)


def utilization_chart(t_s: Sequence[float], series: dict[str, Sequence[Optional[float]]],
                      window: Optional[tuple[float, float]], ylabel: str) -> str:
    fig, ax = plt.subplots(figsize=(7.5, 2.3))
    for label, values in series.items():
        points = [(t, v) for t, v in zip(t_s, values) if v is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.2)
    if window:
        ax.axvspan(window[0], window[1], color="#29335c", alpha=0.08, label="profiled window")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4, frameon=False, fontsize=8)
    return _svg(fig)


VERDICT_COLORS = {"faster": "#1e8449", "slower": "#c0392b", "no-change": "#7f8c8d"}
SPEEDUP_TICKS = (0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100)


def speedup_chart(labels: Sequence[str], speedups: Sequence[float], cis: Sequence[Optional[tuple[float, float]]],
                  verdicts: Sequence[str]) -> str:
    """Each speedup with its interval on a log axis (2x and 0.5x are equally far from 1.0), first on top."""
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.35 * len(labels)))
    for y, (speedup, ci, verdict) in enumerate(zip(speedups, cis, verdicts)):
        lo, hi = ci if ci else (speedup, speedup)
        ax.errorbar([speedup], [y], xerr=[[max(0.0, speedup - lo)], [max(0.0, hi - speedup)]], fmt="o", capsize=3,
                    color=VERDICT_COLORS.get(verdict, "#29335c"))
    ax.axvline(1.0, color="#6b6b70", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    low = min([1.0, *speedups, *(c[0] for c in cis if c)]) / 1.15
    high = max([1.0, *speedups, *(c[1] for c in cis if c)]) * 1.15
    ax.set_xlim(low, high)
    ticks = [t for t in SPEEDUP_TICKS if low <= t <= high]  # fixed ticks: log axes label decades only
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("speedup over the baseline (99% interval)")
    return _svg(fig)
