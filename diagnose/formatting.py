"""How numbers and source locations are written for people: the filters that both Jinja environments use (the
rules' message templates and the report's templates), also called directly where the same figures are written
outside a template, so that a figure reads the same everywhere."""
from __future__ import annotations

from pathlib import Path


def fmt_pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def fmt_ms(value) -> str:
    if value is None:
        return "n/a"
    text = f"{1000 * value:.1f}"
    if value and text in ("0.0", "-0.0"):  # "0.0 ms" would hide a real, small cost
        return f"{1e6 * value:.0f} us"
    return f"{text} ms"


def fmt_gib(value) -> str:
    """Bytes: '3.0 GiB', or '412.5 MiB' below a GiB (where '0.4 GiB' would say little)."""
    if value is None:
        return "n/a"
    return f"{value / 2**30:.1f} GiB" if abs(value) >= 2**30 else f"{value / 2**20:.1f} MiB"


def fmt_int(value) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def display_location(location: str | None, cwd: Path | None = None) -> str | None:
    """'path:line' relative to the current folder when the file is under it, as compilers print them."""
    if not location:
        return location
    path, sep, line = location.rpartition(":")
    if not sep:
        return location
    try:
        rel = Path(path).resolve().relative_to((cwd or Path.cwd()).resolve())
        return f"{rel}:{line}"
    except ValueError:
        return location


NUMBER_FILTERS = {"pct": fmt_pct, "ms": fmt_ms, "gib": fmt_gib}  # the same names in both environments
