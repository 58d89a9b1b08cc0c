"""Read and decompress a trace in a thread while the rest of diagnose is still being imported (zlib and file
reads release the GIL). Kept free of heavy imports, as the analysis package's __init__ is, so that it can
start first."""
from __future__ import annotations

import gzip
import threading
from pathlib import Path
from typing import Optional

_pending: dict[str, tuple[threading.Thread, list]] = {}


def start(path: Path) -> None:
    if not path.is_file():
        return
    box: list = []

    def read() -> None:
        try:
            raw = path.read_bytes()
            box.append(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except Exception:  # the real read reports the error in its own words
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    _pending[str(path)] = (thread, box)


def take(path: Path) -> Optional[bytes]:
    """The prefetched bytes of path (waiting for them), or None when nothing was prefetched or it failed."""
    entry = _pending.pop(str(path), None)
    if entry is None:
        return None
    thread, box = entry
    thread.join()
    return box[0] if box else None
