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
    """Bytes in the largest unit that keeps a whole number in front: '3.0 GiB', '412.5 MiB', '293.5 KiB'."""
    if value is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def fmt_flops(value) -> str:
    """'5.31 TFLOP', '138 MFLOP': three significant digits, in the largest unit below the value."""
    if value is None:
        return "n/a"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} FLOP"


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


def fmt_seconds(value) -> str:
    """'3.7 s', '0.27 s', '41 s': seconds at a precision that reads (compile times, whole runs)."""
    if value is None:
        return "n/a"
    return f"{value:.0f} s" if abs(value) >= 10 else f"{value:.2g} s" if abs(value) < 1 else f"{value:.1f} s"


# the same names in both environments (the report's and the rules')
NUMBER_FILTERS = {"pct": fmt_pct, "ms": fmt_ms, "gib": fmt_gib, "flops": fmt_flops, "seconds": fmt_seconds}


# what the start-up watch calls the script's own code before training, and the first step once a forward has run
OWN_CODE = "your code"
FIRST_STEP = "the first step"


def startup_place(activity: str, place: str) -> str:
    """'in torch/_inductor (compiling)', 'in your code at prep.py:88', 'in the first step (at train.py:40)'."""
    where = display_location(place) or place
    if activity == OWN_CODE:
        return f"in your code at {where}"
    if activity == FIRST_STEP:
        return f"in the first step (at {where})"
    return f"in {where} ({activity})"


def setting_label(optimization: str, setting: dict) -> str:
    """'grad_accumulation(micro_batches=2, batch_size=4096)'; the bare id for a setting of nothing. The combined
    run's list of changes is left out: it is said apart (setting_text)."""
    detail = ", ".join(f"{k}={v}" for k, v in setting.items() if k != "changes")
    return f"{optimization}({detail})" if detail else optimization
