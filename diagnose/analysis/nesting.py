"""The walk behind ops.self_times, written once for two runtimes: plain Python over lists (a small trace), and
numba over arrays (_jitkernels compiles this same function for a big trace, whose op lists would cost about 150
bytes an op as Python objects). It uses only indexing, comparisons and arithmetic, which both run alike."""


def walk_nesting(order, thread_of, starts, ends, counted, stack, self_t, top):
    """Visit ops in `order` (by thread, start, then longest first: a parent before the children that start with
    it), subtract each op's overlap from its direct parent's `self_t`, and mark `top` the ops with no parent on a
    thread that `counted` (indexed by thread code) says is training work. `stack` has room for every op."""
    depth = 0
    current = -1
    for i in order:
        if thread_of[i] != current:
            depth = 0
            current = thread_of[i]
        start = starts[i]
        while depth > 0 and ends[stack[depth - 1]] <= start:
            depth -= 1
        if depth > 0:
            parent = stack[depth - 1]
            self_t[parent] -= min(ends[i], ends[parent]) - start
        elif counted[current]:
            top[i] = True
        stack[depth] = i
        depth += 1
