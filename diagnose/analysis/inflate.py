"""Inflating gzip'd traces: python-isal's ISA-L inflater where it is installed (about 5x zlib's speed on trace
text: the 1M-event trace's 291 MB in 0.07 s against 0.35 s, and a big trace is inflated by both of the stream's
processes), the standard library's zlib where it is not. Both give the same bytes (tested)."""
from __future__ import annotations

import gzip
import zlib

try:
    from isal import igzip as _gzip
    from isal import isal_zlib as _zlib

    ERRORS: tuple = (OSError, EOFError, zlib.error, _zlib.error)  # BadGzipFile is an OSError
except ImportError:  # a platform without isal's wheels: zlib reads the same text, slower
    _gzip, _zlib = gzip, zlib
    ERRORS = (OSError, EOFError, zlib.error)

GZIP_WBITS = 16 + zlib.MAX_WBITS


def gunzip(raw: bytes) -> bytes:
    """A whole gzip file's text (every member, as gzip.decompress reads them)."""
    return _gzip.decompress(raw)


def inflater():
    """A decompressor of one gzip member, zlib's interface (decompress with max_length, unconsumed_tail,
    unused_data, eof, flush)."""
    return _zlib.decompressobj(GZIP_WBITS)
