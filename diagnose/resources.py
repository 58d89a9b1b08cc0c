"""Where diagnose is: its package folder (PACKAGE_DIR: its own frames and files are told apart by it), and the
bundled rules/ and templates/, inside the wheel (diagnose/_data) or at the top of a checkout."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def bundled(name: str) -> Path:
    for candidate in (PACKAGE_DIR / "_data" / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"diagnose is installed without its {name}/ folder")
