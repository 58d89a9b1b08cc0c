"""Where an analysis reads from: a run folder (its traces, capture, samples and stacks, one set per rank) or the
trace files a user passes; each analysed, and several ranks combined. Reads only: the commands write what it gives
(the analysis, the traces relabelled for TensorBoard)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.analysis.metric_values import trace_gpu_name
from diagnose.analysis.ranks import combine, rank_of
from diagnose.capture.datasheets import datasheet_peaks
from diagnose.capture.peak_cache import cached_peaks
from diagnose.errors import UserError
from diagnose.model import Analysis, Capture, Peak
from diagnose.record.run_record import RunRecord
from diagnose.trace import (
    MAX_EVENTS,
    KeptSteps,
    ReadAhead,
    Trace,
    agreed_kept_steps,
    first_pass,
    load_trace,
    usable_cores,
)


def analyze_run(record: RunRecord, capture: Optional[Capture], jobs: int = 1) -> Optional[Analysis]:
    """The run's analysis from its files (None without a trace)."""
    traces = record.trace_paths()
    if not traces:
        return None
    ranks = record.ranks()
    if ranks:
        return _analyze_ranks(record, ranks, record.rank_trace_paths(), jobs)
    trace = load_trace(traces[-1])
    return analyze(Inputs(trace, capture, record.samples(), record.stacks(), peaks=_run_peaks(record, trace)))


def traces_not_summarized(record: RunRecord) -> list[Path]:
    """The run's traces but those a rank analysed where it ran (`diagnose capture`), which it relabelled for
    TensorBoard then."""
    ranks, by_rank = record.ranks(), record.rank_trace_paths()
    summarized = {path for rank, path in by_rank.items() if rank in ranks and ranks[rank].analysis_is_fresh(path)}
    return [path for path in record.trace_paths() if path not in summarized]


def _analyze_ranks(record: RunRecord, ranks: dict[int, RunRecord], traces: dict[int, Path],
                   jobs: int = 1) -> Optional[Analysis]:
    """Each rank with its own capture, samples and trace (tb/rankN.*), then the job's view of them all. A rank
    that analysed its own trace where it ran (`diagnose capture`: RUNRANK/analysis.json, newer than the trace)
    is read, not analysed again; the others in `jobs` worker processes."""
    summarized, calls = {}, []
    for rank, folder in ranks.items():
        mine = traces.get(rank)
        if mine is None:
            continue  # a rank that failed before its profiler stopped wrote no trace
        summary = folder.fresh_analysis(mine)
        if summary is not None:
            summarized[rank] = (rank, str(mine.relative_to(record.path)), summary)
        else:
            calls.append((record, rank, folder, mine))
    analysed = {result[0]: result for result in in_workers(_analyze_rank, calls, jobs)}
    analyses = [both[rank] for rank in ranks if rank in (both := {**summarized, **analysed})]
    if not analyses:
        return None
    return analyses[0][2] if len(analyses) == 1 else combine(analyses)[1]


def _analyze_rank(record: RunRecord, rank: int, folder: RunRecord, path: Path) -> tuple[int, str, Analysis]:
    trace = load_trace(path)
    inputs = Inputs(trace, folder.capture(), folder.samples(), folder.stacks(), peaks=_run_peaks(record, trace))
    return rank, str(path.relative_to(record.path)), analyze(inputs)


def analyze_own_trace(record: RunRecord, rank: int, trace: Path) -> Analysis:
    """One rank's analysis of its own trace, where it ran (`diagnose capture` under the user's torchrun or SLURM)."""
    return _analyze_rank(record, rank, record.rank(rank), trace)[2]


TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(path: Path) -> list[Path]:
    """PATH is one trace file, or a folder of them (one per rank or worker, as tensorboard_trace_handler
    writes them)."""
    if not path.exists():
        raise UserError(f"trace not found: {path}",
                        "pass a torch.profiler trace (.json or .json.gz) or a folder of them")
    if path.is_file():
        return [path]
    if RunRecord(path).has_traces_folder() and not any(path.glob("*.pt.trace.json*")):
        path = RunRecord(path).files.tb  # a run folder of `diagnose run`
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    profiler_named = [p for p in found if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))]
    found = profiler_named or found  # other .json files beside the profiler's (configs, notes) are not traces
    if not found:
        raise UserError(f"no trace files (.json, .json.gz) in {path}",
                        "pass a trace file or the folder the profiler wrote")
    return found


def _source_roots(trace: Path) -> tuple[str, ...]:
    """Where a trace's relative source paths may be found: the current folder, or near the trace (a log folder
    beside the training script, as TensorBoard's handler is usually pointed at)."""
    return (os.getcwd(), *(str(p) for p in trace.resolve().parents[:3]))


def analyze_traces(paths: list[Path], jobs: int = 1, max_events: int = MAX_EVENTS,
                   ahead: Optional[ReadAhead] = None) -> Analysis:
    """Traces of one job: each analysed alone (in `jobs` worker processes when there are several), then combined
    (per-rank table, the rank to diagnose). A trace of more than `max_events` events: a window of its steps.
    `ahead`: the reading of a single trace, begun by the caller (`diagnose analyze` begins it while importing)."""
    if len(paths) == 1:
        return _analyze_trace(0, paths[0], max_events, ahead=ahead)[2]
    calls = [(i, path, max_events, None) for i, path in enumerate(paths)]
    if len(paths) > 1 and max_events > 0:  # the ranks' windows are chosen together: the same steps in each
        counters = in_workers(first_pass, [(path, max_events) for path in paths], jobs)
        windows = agreed_kept_steps(counters, max_events)
        # a rank counted and given no window is read whole (0: not counted again)
        calls = [(i, path, 0 if counter is not None and window is None else max_events, window)
                 for (i, path, _, _), counter, window in zip(calls, counters, windows)]
    analyses = in_workers(_analyze_trace, calls, jobs)
    ranks = [r for r, _, _ in analyses]
    if len(set(ranks)) < len(ranks):  # e.g. several traces of one process, not one per rank
        analyses = [(i, p, a) for i, (_, p, a) in enumerate(analyses)]
    return combine(analyses)[1]


def _analyze_trace(index: int, path: Path, max_events: int = MAX_EVENTS, window: Optional[KeptSteps] = None,
                   ahead: Optional[ReadAhead] = None) -> tuple[int, str, Analysis]:
    trace = load_trace(path, max_events=max_events, kept_steps=window, ahead=ahead)
    inputs = Inputs(trace, source_roots=_source_roots(path), peaks=_trace_peaks(trace))
    return rank_of(trace, index), str(path), analyze(inputs)


def default_jobs() -> int:
    """One worker per core this process may use (as the fast parser counts them)."""
    return usable_cores()


def in_workers(function: Callable, calls: list[tuple], jobs: int) -> list:
    """function(*call) for each call, in order: in this process for one job or one call, else in up to `jobs`
    worker processes (each parses its own trace: memory and time per trace as in one process, the cores shared).
    Forked where the platform can (nothing to import again), else spawned."""
    if jobs <= 1 or len(calls) <= 1:
        return [function(*call) for call in calls]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(min(jobs, len(calls)), mp_context=multiprocessing.get_context(method)) as pool:
        futures = [pool.submit(function, *call) for call in calls]
        return [future.result() for future in futures]


def _run_peaks(record: RunRecord, trace: Trace) -> tuple[Peak, ...]:
    """Measured on the machine the run ran on (RUN/peaks.json), and the GPU's datasheet figures."""
    measured = record.peaks()
    name = trace_gpu_name(trace.metadata) if trace.has_gpu else None
    return (measured.peaks if measured is not None else ()) + (datasheet_peaks(name) if name else ())


def _trace_peaks(trace: Trace) -> tuple[Peak, ...]:
    """A trace's GPU by its name: peaks measured on a machine with that GPU (cached by earlier runs here), and its
    datasheet's. A host-only trace names no device whose peak is known."""
    name = trace_gpu_name(trace.metadata) if trace.has_gpu else None
    return (cached_peaks(name) + datasheet_peaks(name)) if name else ()

