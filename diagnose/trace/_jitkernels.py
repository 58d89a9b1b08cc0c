"""numba kernels for jitscan.py (imported only there, and only when numba is installed): FAST_EVENT's grammar,
walked byte by byte, and (at the end) the analysis' passes over a big trace's arrays, compiled from the plain
Python of nesting.py, interval_sweeps.py and key_join.py.

    "ph":\\s*"X",\\s*"cat":\\s*"([^"\\\\]*)",\\s*"name":\\s*"((?:[^"\\\\]|\\\\.)*)",\\s*"pid":\\s*(ID),\\s*"tid":\\s*(ID),
    \\s*"ts":\\s*(NUMBER),\\s*"dur":\\s*(NUMBER)
    (?:,\\s*"args":\\s*\\{\\s*(?:"[^"\\\\]*":\\s*(?:SCALAR|"[^"\\\\]*"),\\s*)*?"correlation":\\s*(\\d+))?

with \\s* before every comma too (torch 2.13 writes "dur": 1.5 and the comma after it on lines of their own).
ID is -?\\d+ or a string without escapes; NUMBER is -?\\d+(\\.\\d*)?([eE][-+]?\\d+)?; SCALAR is a run of bytes
without , { } " [ ] that does not begin with whitespace. As re.findall does, the scan tries a match at each
'"ph":' and goes on after the end of each match."""
from __future__ import annotations

import numpy as np
from numba import njit

from diagnose.trace import interval_sweeps as _sweeps
from diagnose.trace import key_join as _key_join
from diagnose.trace.nesting import in_thread_order as _in_thread_order
from diagnose.trace.nesting import walk_first_seen as _walk_first_seen
from diagnose.trace.nesting import walk_frames as _walk_frames
from diagnose.trace.nesting import walk_nesting as _walk_nesting
from diagnose.trace.nesting import walk_outermost as _walk_outermost
from diagnose.trace.nesting import walk_parents as _walk_parents

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
QUOTE, BACKSLASH, COMMA, COLON = 34, 92, 44, 58
# what _scan returns instead of a row count: a chunk it cannot read (the expression then reads it), or rows run out
CORRELATION_TOO_LONG, FULL = -2, -4
EXACT_DIGITS = 1 << 53  # an integer up to this is a double exactly
POWERS_OF_TEN = np.array([10.0 ** k for k in range(23)])  # each exact: 5**22 < 2**53


@njit(cache=True, nogil=True)
def _space(c):
    return c == 32 or (9 <= c <= 13)


@njit(cache=True, nogil=True)
def _digit(c):
    return 48 <= c <= 57


@njit(cache=True, nogil=True)
def _skip_space(t, i, end):
    while i < end and _space(t[i]):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _literal(t, i, end, keys, word):
    """i + the word's length where t[i:] begins with keys' word (a row, NUL-padded), else -1."""
    k = 0
    while k < keys.shape[1] and keys[word, k] != 0:
        if i + k >= end or t[i + k] != keys[word, k]:
            return -1
        k += 1
    return i + k


@njit(cache=True, nogil=True)
def _key(t, i, end, keys, word):
    """After `\\s*,\\s*"word":\\s*` from i, or -1 (word is the key with its quotes and colon)."""
    i = _skip_space(t, i, end)
    if i >= end or t[i] != COMMA:
        return -1
    i = _literal(t, _skip_space(t, i + 1, end), end, keys, word)
    return -1 if i < 0 else _skip_space(t, i, end)


@njit(cache=True, nogil=True)
def _plain_string(t, i, end):
    """After a string without escapes that starts at i (its opening quote), or -1."""
    if i >= end or t[i] != QUOTE:
        return -1
    i += 1
    while i < end and t[i] != QUOTE and t[i] != BACKSLASH:
        i += 1
    return i + 1 if i < end and t[i] == QUOTE else -1


@njit(cache=True, nogil=True)
def _string(t, i, end):
    """After a string with escapes allowed (a backslash and any byte), or -1."""
    if i >= end or t[i] != QUOTE:
        return -1
    i += 1
    while i < end:
        c = t[i]
        if c == QUOTE:
            return i + 1
        if c == BACKSLASH and i + 1 < end and t[i + 1] == 10:
            return -1  # the expression's `.` does not take a newline
        i += 2 if c == BACKSLASH else 1
    return -1


@njit(cache=True, nogil=True)
def _digits(t, i, end):
    j = i
    while j < end and _digit(t[j]):
        j += 1
    return j


@njit(cache=True, nogil=True)
def _id(t, i, end):
    """After -?\\d+ or a string without escapes, or -1."""
    j = i + 1 if i < end and t[i] == 45 else i
    k = _digits(t, j, end)
    if k > j:
        return k
    return _plain_string(t, i, end)


@njit(cache=True, nogil=True)
def _number(t, i, end):
    """After -?\\d+(\\.\\d*)?([eE][-+]?\\d+)?, or -1."""
    j = i + 1 if i < end and t[i] == 45 else i
    k = _digits(t, j, end)
    if k == j:
        return -1
    if k < end and t[k] == 46:
        k = _digits(t, k + 1, end)
    if k < end and (t[k] == 101 or t[k] == 69):
        e = k + 1
        if e < end and (t[e] == 43 or t[e] == 45):
            e += 1
        f = _digits(t, e, end)
        if f > e:
            k = f
    return k


@njit(cache=True, nogil=True)
def _scalar(t, i, end):
    """After [^,{}"\\[\\]\\s][^,{}"\\[\\]]*, or -1."""
    if i >= end or _space(t[i]) or _stops_scalar(t[i]):
        return -1
    i += 1
    while i < end and not _stops_scalar(t[i]):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _stops_scalar(c):
    return c == COMMA or c == 123 or c == 125 or c == QUOTE or c == 91 or c == 93


@njit(cache=True, nogil=True)
def _args_at(t, i, end, keys):
    r"""Where the args object's `{` is when `\s*,\s*"args":\s*{` follows i (just after dur), else -1."""
    i = _key(t, i, end, keys, 7)
    return i if 0 <= i < end and t[i] == 123 else -1


@njit(cache=True, nogil=True)
def _correlation(t, args, end, keys):
    """(value, end) of the optional args group whose `{` is at args (-1: none), or (-1, -1) where it does not
    match; value CORRELATION_TOO_LONG for an id past int64 (the caller then gives up on the chunk)."""
    if args < 0:
        return -1, -1
    i = _skip_space(t, args + 1, end)
    while i < end:
        j = _literal(t, i, end, keys, 8)
        if j >= 0:
            j = _skip_space(t, j, end)
            k = _digits(t, j, end)
            if k > j:
                if k - j > 18:
                    return CORRELATION_TOO_LONG, -1
                value = 0
                for m in range(j, k):
                    value = value * 10 + (t[m] - 48)
                return value, k
        j = _plain_string(t, i, end)  # one more member: "key":\s*(SCALAR|"string"),\s*
        if j < 0 or j >= end or t[j] != COLON:
            return -1, -1
        j = _skip_space(t, j + 1, end)
        k = _plain_string(t, j, end) if j < end and t[j] == QUOTE else _scalar(t, j, end)
        k = _skip_space(t, k, end) if k >= 0 else k
        if k < 0 or k >= end or t[k] != COMMA:
            return -1, -1
        i = _skip_space(t, k + 1, end)
    return -1, -1


@njit(cache=True, nogil=True)
def _hash(t, a, b, c, d):
    """FNV-1a over t[a:b], a separator, and t[c:d]."""
    h = FNV_OFFSET
    for k in range(a, b):
        h = (h ^ np.uint64(t[k])) * FNV_PRIME
    h = (h ^ np.uint64(256)) * FNV_PRIME
    for k in range(c, d):
        h = (h ^ np.uint64(t[k])) * FNV_PRIME
    return h


@njit(cache=True, nogil=True)
def _exact_number(t, a, b):
    """The number t[a:b] (the grammar's NUMBER) where one IEEE operation gives it correctly rounded, as Python's
    float() does: its digits an integer up to 2**53 and its decimal exponent within 22 either way, so that both
    operands are exact doubles (Clinger's fast path). NaN otherwise: numpy then parses its text."""
    i = a + 1 if t[a] == 45 else a
    digits, exponent = 0, 0
    while i < b and _digit(t[i]):
        digits = digits * 10 + (t[i] - 48)
        if digits > EXACT_DIGITS:
            return np.nan
        i += 1
    if i < b and t[i] == 46:
        i += 1
        while i < b and _digit(t[i]):
            digits = digits * 10 + (t[i] - 48)
            if digits > EXACT_DIGITS:
                return np.nan
            exponent -= 1
            i += 1
    if i < b:  # the exponent: the grammar matched its digits
        i += 1
        sign = 1
        if t[i] == 45 or t[i] == 43:
            sign = -1 if t[i] == 45 else 1
            i += 1
        written = 0
        while i < b:
            written = written * 10 + (t[i] - 48)
            if written > 1000:
                return np.nan
            i += 1
        exponent += sign * written
    if exponent < -22 or exponent > 22:
        return np.nan
    value = float(digits) / POWERS_OF_TEN[-exponent] if exponent <= 0 else float(digits) * POWERS_OF_TEN[exponent]
    return -value if t[a] == 45 else value


@njit(cache=True, nogil=True)
def _match(t, p, end, keys, ints, values, hashes, n):
    """The event whose '"ph":' is at p into row n; returns where the match ends, -1 where it does not match, or
    CORRELATION_TOO_LONG where the scanner cannot read it."""
    i = _skip_space(t, p + 5, end)
    i = _literal(t, i, end, keys, 0)  # "X"
    if i < 0:
        return -1
    i = _key(t, i, end, keys, 1)  # "cat":
    cat = i
    i = _plain_string(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    cat_end = i
    i = _key(t, i, end, keys, 2)  # "name":
    name = i
    i = _string(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    name_end = i
    i = _key(t, i, end, keys, 3)  # "pid":
    pid = i
    i = _id(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    pid_end = i
    i = _key(t, i, end, keys, 4)  # "tid":
    tid = i
    i = _id(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    tid_end = i
    i = _key(t, i, end, keys, 5)  # "ts":
    ts = i
    i = _number(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    ts_end = i
    i = _key(t, i, end, keys, 6)  # "dur":
    dur = i
    i = _number(t, i, end) if i >= 0 else -1
    if i < 0:
        return -1
    dur_end = i
    args = _args_at(t, i, end, keys)
    corr, corr_end = _correlation(t, args, end, keys)
    if corr == CORRELATION_TOO_LONG:
        return CORRELATION_TOO_LONG
    values[n, 0], values[n, 1] = _exact_number(t, ts, ts_end), _exact_number(t, dur, dur_end)
    ints[n, 10], ints[n, 11], ints[n, 12], ints[n, 13], ints[n, 14] = ts, ts_end, dur, dur_end, args
    ints[n, 0], ints[n, 1], ints[n, 2], ints[n, 3], ints[n, 4] = p, cat + 1, cat_end - 1, name + 1, name_end - 1
    ints[n, 5], ints[n, 6], ints[n, 7], ints[n, 8], ints[n, 9] = pid, pid_end, tid, tid_end, corr
    hashes[n, 0] = _hash(t, cat + 1, cat_end - 1, name + 1, name_end - 1)
    hashes[n, 1] = _hash(t, pid, pid_end, tid, tid_end)
    return corr_end if corr >= 0 else dur_end


@njit(cache=True, nogil=True)
def _is_word(t, a, b, keys, word):
    """Whether t[a:b] is keys' word, exactly."""
    return _literal(t, a, b, keys, word) == b


@njit(cache=True, nogil=True)
def _integer(t, a, b):
    """-?\\d+ in t[a:b], at most 18 digits (fits int64), and True; (0, False) for any other number."""
    i = a + 1 if t[a] == 45 else a
    if b - i > 18 or b == i:
        return 0, False
    value = 0
    for k in range(i, b):
        if not _digit(t[k]):
            return 0, False
        value = value * 10 + (t[k] - 48)
    return (-value if t[a] == 45 else value), True


@njit(cache=True, nogil=True)
def _member_value_end(t, v, end):
    """After a member's value that is not read (a string, or a scalar: no list or object), or -1."""
    return _string(t, v, end) if v < end and t[v] == QUOTE else _scalar(t, v, end)


@njit(cache=True, nogil=True)
def _member_key(t, i, end):
    """(key start, key end, value start) of the member `"key":\\s*` at i, or (-1, -1, -1)."""
    k = _plain_string(t, i, end)
    if k < 0:
        return -1, -1, -1
    c = _skip_space(t, k, end)
    if c >= end or t[c] != COLON:
        return -1, -1, -1
    return i, k, _skip_space(t, c + 1, end)


@njit(cache=True, nogil=True)
def _memory_args(t, i, end, keys, amounts, m):
    """The args object from i (its `{`) into amounts[m] (Total Allocated, Total Reserved, Bytes, Device Type: 0
    where absent); returns (end, whether Total Allocated was there), end -1 where the kernel does not read it."""
    for column in range(4):
        amounts[m, column] = 0
    seen = 0
    i = _skip_space(t, i + 1, end)
    if i < end and t[i] == 125:
        return i + 1, False
    while i < end:
        a, b, v = _member_key(t, i, end)
        if a < 0:
            return -1, False
        column = -1
        for c in range(4):
            if _is_word(t, a, b, keys, MEMORY_KEYS + c):
                column = c
        if column >= 0 and not (seen >> column) & 1:  # the first of a key, as the expressions read it
            k = _number(t, v, end)
            value, whole = _integer(t, v, k) if k > v else (0, False)
            if not whole:
                return -1, False  # a number that is not an integer's: the expressions read that chunk
            amounts[m, column] = value
            seen |= 1 << column
        else:
            k = _member_value_end(t, v, end)
        k = _skip_space(t, k, end) if k >= 0 else k
        if k < 0 or k >= end:
            return -1, False
        if t[k] == 125:
            return k + 1, (seen & 1) == 1
        if t[k] != COMMA:
            return -1, False
        i = _skip_space(t, k + 1, end)
    return -1, False


@njit(cache=True, nogil=True)
def _named_before(t, p, start, keys):
    """0 when the object whose '"ph":' is at p holds no "[memory]" before it, else -1 (or where its `{` is not
    found near)."""
    j = p - 1
    while j >= start and p - j < 4096:
        if t[j] == 123:
            return 0
        if t[j] == QUOTE and _literal(t, j, p, keys, 12) >= 0:
            return -1
        j -= 1
    return -1


@njit(cache=True, nogil=True)
def _instant(t, p, x, start, end, keys, rows, times, amounts, hashes, m):
    """The instant event whose '"ph":' is at p and "i" ends at x: 1 when it is a memory event read into row m
    (rows: mark, pid and tid spans, ts span, whether an allocator's), 0 when it is not one, -1 when the kernel does
    not read it (its name past a member it cannot skip, or a memory event laid out otherwise): the expressions then
    read that chunk. An instant whose name comes before "ph" (Kineto's "Record Window End") has its head looked
    at."""
    i = x
    while True:  # the members before the name ("cat", "s")
        i = _skip_space(t, i, end)
        if i < end and t[i] == 125:
            return _named_before(t, p, start, keys)
        if i >= end or t[i] != COMMA:
            return -1
        a, b, v = _member_key(t, _skip_space(t, i + 1, end), end)
        if a < 0:
            return -1
        if _is_word(t, a, b, keys, 11):  # "name"
            break
        i = _member_value_end(t, v, end)
        if i < 0:
            return -1
    after = _literal(t, v, end, keys, 12)  # "[memory]"
    if after < 0:
        return 0
    pid = _key(t, after, end, keys, 3)
    pid_end = _id(t, pid, end) if pid >= 0 else -1
    tid = _key(t, pid_end, end, keys, 4) if pid_end >= 0 else -1
    tid_end = _id(t, tid, end) if tid >= 0 else -1
    ts = _key(t, tid_end, end, keys, 5) if tid_end >= 0 else -1
    ts_end = _number(t, ts, end) if ts >= 0 else -1
    args = _key(t, ts_end, end, keys, 7) if ts_end >= 0 else -1
    if args < 0 or args >= end or t[args] != 123:
        return -1
    args_end, allocator = _memory_args(t, args, end, keys, amounts, m)
    if args_end < 0:
        return -1
    rows[m, 0], rows[m, 1], rows[m, 2], rows[m, 3], rows[m, 4] = p, pid, pid_end, tid, tid_end
    rows[m, 5], rows[m, 6], rows[m, 7] = ts, ts_end, 1 if allocator else 0
    times[m] = _exact_number(t, ts, ts_end)
    hashes[m] = _hash(t, pid, pid_end, tid, tid_end)
    return 1


@njit(cache=True, nogil=True)
def _scan(t, start, end, keys, ints, values, hashes, counts, memory):
    """Each '"ph":' found by Horspool's search (the byte under the pattern's end says how far it may move).
    counts: the complete events ('"ph":\\s*"X"'), matched or not, and the profiler's own spans among them
    ('"cat":\\s*"Trace"' next), which the expression's reader counts with two passes over the text; the memory
    events read into `memory` (rows, times, amounts, hashes), and those the kernel could not read."""
    rows, times, amounts, memory_hashes = memory
    n = m = 0
    counts[0] = counts[1] = counts[2] = counts[3] = 0
    i = start
    limit = end - 5
    while i <= limit:
        c = t[i + 4]
        if c != COLON:
            i += 1 if c == QUOTE else 2 if c == 104 else 3 if c == 112 else 5
            continue
        if t[i] == QUOTE and t[i + 1] == 112 and t[i + 2] == 104 and t[i + 3] == QUOTE:
            value = _skip_space(t, i + 5, end)
            x = _literal(t, value, end, keys, 0)  # "X"
            if x >= 0:
                counts[0] += 1
                category = _key(t, x, end, keys, 1)
                if category >= 0 and _literal(t, category, end, keys, 9) >= 0:  # "Trace"
                    counts[1] += 1
                if n >= len(ints):
                    return FULL  # the caller grows the rows and scans again
                after = _match(t, i, end, keys, ints, values, hashes, n)
                if after < -1:
                    return after
                if after >= 0:
                    if _is_word(t, ints[n, 3] - 1, ints[n, 4] + 1, keys, 12):  # a complete event named "[memory]"
                        counts[3] += 1
                    n += 1
                    i = after
                    continue
            else:
                x = _literal(t, value, end, keys, 10)  # "i"
                if x >= 0:
                    if m >= len(rows):
                        return FULL
                    read = _instant(t, i, x, start, end, keys, rows, times, amounts, memory_hashes, m)
                    if read > 0:
                        m += 1
                    elif read < 0:
                        counts[3] += 1
        i += 5  # ':' is only the pattern's last byte, and the pattern cannot overlap itself
    counts[2] = m
    return n


WORDS = (b'"X"', b'"cat":', b'"name":', b'"pid":', b'"tid":', b'"ts":', b'"dur":', b'"args":', b'"correlation":',
         b'"Trace"', b'"i"', b'"name"', b'"[memory]"',
         b'"Total Allocated"', b'"Total Reserved"', b'"Bytes"', b'"Device Type"')  # memory_events.ARG_KEYS' order
MEMORY_KEYS = 13
KEYS = np.zeros((len(WORDS), 24), dtype=np.uint8)  # one word a row, NUL-padded
for _row, _word in enumerate(WORDS):
    KEYS[_row, :len(_word)] = np.frombuffer(_word, dtype=np.uint8)


def scan(text, start, end, ints, values, hashes, counts, memory) -> int:
    """Rows filled (ints: mark, category, name, pid and tid spans, correlation, ts and dur spans, the args' `{`;
    values: ts and dur, NaN where numpy parses their text; hashes: label and thread; counts: complete events, the
    profiler's spans among them, memory events read into `memory`'s rows, memory events not read), or a negative
    code where the chunk is left to the expression."""
    return _scan(text, start, end, KEYS, ints, values, hashes, counts, memory)


@njit(cache=True, nogil=True)
def same_bytes(t, spans, representative):
    for n in range(len(spans)):
        r = representative[n]
        a, b, c, d = spans[n, 0], spans[n, 1], spans[n, 2], spans[n, 3]
        ra, rb, rc, rd = spans[r, 0], spans[r, 1], spans[r, 2], spans[r, 3]
        if b - a != rb - ra or d - c != rd - rc:
            return False
        for k in range(b - a):
            if t[a + k] != t[ra + k]:
                return False
        for k in range(d - c):
            if t[c + k] != t[rc + k]:
                return False
    return True


# ops.self_times' walk, the same function compiled: over a big trace's arrays, no Python object per op
walk_nesting = njit(cache=True, nogil=True)(_walk_nesting)
in_thread_order = njit(cache=True, nogil=True)(_in_thread_order)
# frames._walked_segments' sweep over a big trace's Python frames
walk_frames = njit(cache=True, nogil=True)(_walk_frames)
# nesting_parents' depths and parents of spans that nest, as the walk finds them
walk_parents = njit(cache=True, nogil=True)(_walk_parents)
# flops.outermost_in's walk, compiled the same way
walk_outermost = njit(cache=True, nogil=True)(_walk_outermost)
# spans.present_in_order over a big trace's codes: one pass, where np.unique sorts a copy and its order
walk_first_seen = njit(cache=True, nogil=True)(_walk_first_seen)

# intervals.py's union, intersect and subtract over a big trace's intervals, as passes (interval_sweeps.py)
ascending = njit(cache=True, nogil=True)(_sweeps.ascending)
union_into = njit(cache=True, nogil=True)(_sweeps.union_into)
is_chain = njit(cache=True, nogil=True)(_sweeps.is_chain)
coverage_into = njit(cache=True, nogil=True)(_sweeps.coverage_into)

# timeline.from_launch's lookup by correlation id over a big trace's device events, as a pass (key_join.py)
values_by_key = njit(cache=True, nogil=True)(_key_join.values_by_key)
