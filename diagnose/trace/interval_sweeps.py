"""intervals.py's union and intersect/subtract as single passes, for numba to compile (_jitkernels) once a big
trace has loaded it: numpy's vectorised forms hold several arrays as long as their input (sorted copies, running
maxima, block ids, every endpoint with its counts), about 60 bytes an interval for a union and 200 for an
intersection, where a pass holds its output only. Plain Python here (indexing, comparisons), so that a test runs
them as they are, against numpy's forms, with or without numba. Both give the same endpoints, which they copy."""


def ascending(values, order):
    """Whether `values` taken in `order` (empty: as they are) never decrease (then a union, or key_join's lookup,
    needs no sort); a NaN says no (numpy's sort puts it last)."""
    count = len(order) if len(order) else len(values)
    for k in range(count):
        i = order[k] if len(order) else k
        if values[i] != values[i]:
            return False
        if k > 0 and values[i] < values[order[k - 1] if len(order) else k - 1]:
            return False
    return True


def union_into(starts, ends, order, out):
    """Merge the intervals (starts[i], ends[i]) for i in `order` (by start; empty: every i, as they are) into
    `out`; return how many. A new interval starts where one begins after everything before it has ended
    (touching ones merge); its end is the latest end so far, as numpy's running maximum is (never reset)."""
    n = 0
    running = 0.0
    for k in range(len(order) if len(order) else len(starts)):
        i = order[k] if len(order) else k
        start, end = starts[i], ends[i]
        if k == 0:
            out[n, 0] = start
            running = end
        else:
            if start > running:  # after everything before it has ended: a new interval
                n += 1
                out[n, 0] = start
            if running != running or end != end:  # np.maximum: NaN once either is (else the first when equal)
                running = running + end
            elif end > running:
                running = end
        out[n, 1] = running
    return n + 1 if (len(order) or len(starts)) else 0


def is_chain(a):
    """Whether the intervals follow one another: each starts no earlier than the last ended, and ends no earlier
    than it starts (disjoint and sorted, as every result of intervals.py is), so their endpoints never decrease."""
    for i in range(len(a)):  # written so that a NaN fails every test (a sweep over one would never end)
        if not (a[i, 1] >= a[i, 0]) or (i > 0 and not (a[i, 0] >= a[i - 1, 1])):
            return False
    return True


def coverage_into(a, b, without_b, out):
    """Where `a` covers and `b` covers (`without_b`: does not), for chains `a` and `b`, into `out`; return how
    many. The endpoints of both are swept in order; at each distinct time all that start or end there count, and
    the span to the next time is kept or not as a whole (so a zero-length interval changes nothing), as numpy's
    sorted endpoints and running counts do. Kept spans that touch are one interval."""
    i = j = 0
    in_a = in_b = 0
    na, nb = 2 * len(a), 2 * len(b)
    n = 0
    open_run = False
    while i < na or j < nb:
        t = a[i >> 1, i & 1] if j >= nb or (i < na and a[i >> 1, i & 1] <= b[j >> 1, j & 1]) else b[j >> 1, j & 1]
        while i < na and a[i >> 1, i & 1] == t:
            in_a += 1 if (i & 1) == 0 else -1
            i += 1
        while j < nb and b[j >> 1, j & 1] == t:
            in_b += 1 if (j & 1) == 0 else -1
            j += 1
        if i >= na and j >= nb:
            break
        following = a[i >> 1, i & 1] if j >= nb or (i < na and a[i >> 1, i & 1] <= b[j >> 1, j & 1]) \
            else b[j >> 1, j & 1]
        kept = in_a > 0 and ((in_b <= 0) if without_b else (in_b > 0))
        if kept:
            if not open_run:
                out[n, 0] = t
                open_run = True
            out[n, 1] = following
        elif open_run:
            n += 1
            open_run = False
    return n + 1 if open_run else n
