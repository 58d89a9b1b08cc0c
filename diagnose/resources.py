"""Where the bundled rules/ and templates/ are: inside the wheel (diagnose/_data) or at the top of a checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def bundled(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"diagnose is installed without its {name}/ folder")
