"""timeline.from_launch's lookup of each device event's launch by correlation id, as one pass for numba to compile
(_jitkernels) once a big trace has loaded it. numpy's form gathers the sorted keys, the values in their order, the
positions found and the keys and values there: six arrays as long as the inputs, where this pass binary-searches
through the sort order and writes its output alone (interval_sweeps.ascending says when the keys need no sort).
Plain Python, run as it is by a test against numpy's form."""


def values_by_key(keys, order, values, probes, missing, out):
    """out[i] = values[k] for the first k (in `order`, a stable sort of `keys`; empty: keys ascend already) whose
    key is probes[i]; `missing` where none is, or where probes[i] < 0 (no correlation)."""
    n = len(keys)
    for i in range(len(probes)):
        probe = probes[i]
        out[i] = missing
        if probe < 0:
            continue
        low, high = 0, n
        while low < high:  # the leftmost position whose key is at least the probe, as searchsorted's "left"
            middle = (low + high) >> 1
            if keys[order[middle] if len(order) else middle] < probe:
                low = middle + 1
            else:
                high = middle
        if low < n:
            k = order[low] if len(order) else low
            if keys[k] == probe:
                out[i] = values[k]
