"""The walks behind ops.self_times, nesting_parents, frames' pieces, flops.outermost_in and spans.present_in_order,
each written once for two
runtimes: plain Python over lists (a small trace), and numba over arrays (_jitkernels compiles these same functions
for a big trace, whose op lists would cost about 150 bytes an op as Python objects). They use only indexing,
comparisons and arithmetic, which both run alike. (in_thread_order, a check that spares a big trace a sort, runs
compiled only; a test runs it as Python too.)"""
import math


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


def walk_parents(thread, starts, ends, stack, depth, parent):
    """The walk's depth and parent (-1: none) of each span, the spans by thread, start, then longest first, as
    walk_nesting visits them; False as soon as one ends after its parent (they do not nest: nesting_parents' array
    form then decides). Where every span ends within its parent, the spans open at a span's start are its
    ancestors, so the depth and parent are those nesting_parents' counts give."""
    d = 0
    for i in range(len(starts)):
        if i == 0 or thread[i] != thread[i - 1]:
            d = 0
        while d > 0 and ends[stack[d - 1]] <= starts[i]:
            d -= 1
        depth[i] = d
        if d > 0:
            parent[i] = stack[d - 1]
            if ends[i] > ends[stack[d - 1]]:
                return False
        else:
            parent[i] = -1
        stack[d] = i
        d += 1
    return True


BUILT_IN, USER, LIBRARY, FRAMEWORK = 0, 1, 2, 3  # a Python frame's role (analysis/frames.py)


def walk_frames(starts, ends, role, own, stack_end, stack_location, stack_library, out_times, out_location,
                out_library):
    """frames._walked_segments over arrays: the frames (one thread's, by start, the outer first) swept once with a
    stack, each piece of time given to the frame on top: its location (a code; -1: none) and whether it is in
    torch's own Python. A built-in call's time is its caller's, a user frame's is its own, a library frame's stays
    with the user's frame around it. Returns the pieces put in out_*."""
    n = 0
    d = 0
    cursor = starts[0] if len(starts) else 0.0
    for i in range(len(starts) + 1):  # the last round, past the frames, empties the stack
        start = starts[i] if i < len(starts) else math.inf
        while d > 0 and stack_end[d - 1] <= start:
            if stack_end[d - 1] > cursor:
                out_times[n, 0], out_times[n, 1] = cursor, stack_end[d - 1]
                out_location[n], out_library[n] = stack_location[d - 1], stack_library[d - 1]
                n += 1
            cursor = max(cursor, stack_end[d - 1])
            d -= 1
        if i == len(starts):
            break
        if d > 0 and start > cursor:
            out_times[n, 0], out_times[n, 1] = cursor, start
            out_location[n], out_library[n] = stack_location[d - 1], stack_library[d - 1]
            n += 1
        cursor = max(cursor, start)
        outer_location = stack_location[d - 1] if d > 0 else -1
        outer_library = stack_library[d - 1] if d > 0 else False
        if role[i] == USER:
            location, library = own[i], False
        elif role[i] == BUILT_IN:
            location, library = outer_location, outer_library
        else:
            location, library = outer_location, outer_library or role[i] == FRAMEWORK
        stack_end[d] = min(ends[i], stack_end[d - 1]) if d > 0 else ends[i]
        stack_location[d], stack_library[d] = location, library
        d += 1
    return n


def walk_outermost(order, thread_of, starts, durations, open_until, keep):
    """Visit ops in `order` (by start, the longest first among equal starts) and put in `keep` each one that does
    not start inside the last one kept on its thread (`open_until`, by thread code: where that one ends, -inf at
    first); return how many were kept."""
    n = 0
    for i in order:
        thread = thread_of[i]
        if starts[i] < open_until[thread]:
            continue
        keep[n] = i
        n += 1
        open_until[thread] = starts[i] + durations[i]
    return n


def walk_first_seen(codes, first, out):
    """Put in `out` each code of `codes` the first time it appears (`first`, by code: -1 until then, then where);
    return how many there are (-1 at a code outside `first`: compiled, nothing checks an index)."""
    n = 0
    for i in range(len(codes)):
        code = codes[i]
        if code < 0 or code >= len(first):
            return -1
        if first[code] < 0:
            first[code] = i
            out[n] = code
            n += 1
    return n


def in_thread_order(thread_of, starts, ends, last):
    """Whether each thread's ops come by start, the longest first among equal starts (`last`, by thread code: -1),
    as a trace's ops often do: then a stable sort by thread alone gives self_times' order."""
    for i in range(len(thread_of)):
        thread = thread_of[i]
        before = last[thread]
        if before >= 0 and (starts[i] < starts[before] or (starts[i] == starts[before] and ends[i] > ends[before])):
            return False
        last[thread] = i
    return True
