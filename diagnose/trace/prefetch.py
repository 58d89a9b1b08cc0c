"""Read and decompress a trace in a thread while the rest of diagnose is still being imported (zlib and file
reads release the GIL). Kept free of heavy imports, as the analysis package's __init__ is, so that it can
start first."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from diagnose.trace.inflate import gunzip

_pending: dict[str, tuple[threading.Thread, list]] = {}
# a trace whose text is larger is streamed (stream.py), in bounded memory and as fast; the whole text, held with
# its parsed events, would take about twice its size
STREAM_OVER_BYTES = 128 << 20
# a .gz this big is streamed whatever its size field says: the field wraps at 4 GiB, and traces compress 10-20x
STREAM_OVER_GZIP_BYTES = 96 << 20
# past this many events only a window of a trace's steps is kept (window.py): held here, light to import
MAX_EVENTS = 10_000_000


def text_is_big(path: Path) -> bool:
    """Whether the text of the trace at `path` is big enough to be read as a stream (a .gz's size field)."""
    try:
        size = text_bytes(path)
    except OSError:
        return False  # the real read reports it
    return size is None or size > STREAM_OVER_BYTES


def text_bytes(path: Path) -> Optional[int]:
    """The length of the trace's text: the file's, or a .gz's size field; None for a .gz too big to trust that
    field (it wraps at 4 GiB). OSError when the file cannot be read."""
    size = path.stat().st_size
    with path.open("rb") as file:
        if file.read(2) != b"\x1f\x8b":
            return size
        if size > STREAM_OVER_GZIP_BYTES:
            return None
        file.seek(-4, 2)
        return int.from_bytes(file.read(4), "little")


def start(path: Path) -> None:
    if not path.is_file() or text_is_big(path):  # a big trace is streamed, never held whole
        return
    box: list = []

    def read() -> None:
        try:
            raw = path.read_bytes()
            box.append(gunzip(raw) if raw[:2] == b"\x1f\x8b" else raw)
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
