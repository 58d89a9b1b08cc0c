"""Read and decompress a trace in a thread while the rest of diagnose is still being imported (zlib and file
reads release the GIL). Kept free of heavy imports, as the analysis package's __init__ is, so that it can
start first."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from diagnose.trace.inflate import gunzip

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


class Prefetch:
    """A trace's bytes, read and decompressed in a thread of their own."""

    def __init__(self, path: Path):
        self.path, self.box = path, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            raw = self.path.read_bytes()
            self.box.append(gunzip(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except Exception:  # the real read reports the error in its own words
            pass

    def bytes(self) -> Optional[bytes]:
        """The bytes (waiting for them), or None when the read failed."""
        self.thread.join()
        return self.box[0] if self.box else None


def start(path: Path) -> Optional[Prefetch]:
    """Begin reading the trace at `path` (None: not a file, or one to stream, never held whole)."""
    if not path.is_file() or text_is_big(path):
        return None
    return Prefetch(path)
