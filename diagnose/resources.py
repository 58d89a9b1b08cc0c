"""Where the bundled rules/ and templates/ are: inside the wheel (diagnose/_data) or at the top of a checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def bundled(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"diagnose is installed without its {name}/ folder")


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
