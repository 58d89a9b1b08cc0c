"""The measured peaks' cache: one JSON file in the user's cache folder, keyed by machine (device, driver, torch).
Reading it needs no torch: analysing a trace from a GPU measured here before uses it."""
from __future__ import annotations

import json
import os
from pathlib import Path

from diagnose.model import Peak


def cached_peaks(name: str) -> tuple[Peak, ...]:
    """Peaks measured earlier on a device of this name (any torch version), without measuring anything."""
    found: dict[str, Peak] = {}
    for entries in read_cache().values():
        for entry in entries:
            if entry.get("device") == name:
                found[entry["dtype"]] = Peak(**entry)
    return tuple(found.values())


def cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "diagnose" / "machine-peaks.json"


def read_cache() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def write_cache(cache: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
    except OSError:  # a read-only home: measured again next time, nothing lost
        pass
