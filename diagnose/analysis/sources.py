"""Where an analysis reads from: a run folder (its traces, capture, samples and stacks, one set per rank) or the
trace files a user passes; each analysed, and several ranks combined."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.analysis.metric_values import trace_gpu_name
from diagnose.analysis.ranks import combine, rank_of
from diagnose.capture.datasheets import datasheet_peaks
from diagnose.capture.peak_cache import cached_peaks
from diagnose.capture.rank_files import rank_dirs
from diagnose.errors import UserError
from diagnose.model import Analysis, Capture, MachinePeaks, Peak, Samples, StackSamples
from diagnose.runfolder import RunFolder
from diagnose.serial import read_json, write_json
from diagnose.tbcompat import adapt_trace_for_tensorboard
from diagnose.trace import (
    MAX_EVENTS,
    KeptSteps,
    ReadAhead,
    Trace,
    agreed_kept_steps,
    first_pass,
    load_trace,
    text_is_big,
    usable_cores,
)

RANK_TRACE = re.compile(r"rank(\d+)\.")  # tb/rankN.<worker>.pt.trace.json: the trace handler's name, rank first


def trace_paths(run_dir: Path) -> list[Path]:
    return sorted(p for p in RunFolder(run_dir).tb.glob("*.pt.trace.json*") if not p.name.endswith(".tmp"))


def rank_traces(traces: list[Path]) -> dict[int, Path]:
    """Each rank's trace among `traces` (sorted), by rank: the last when a rank wrote several."""
    found = {}
    for path in traces:
        match = RANK_TRACE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def analyze_run(run_dir: Path, capture: Optional[Capture], jobs: int = 1) -> Optional[Analysis]:
    traces = trace_paths(run_dir)
    if not traces:
        return None
    ranks, by_rank = rank_dirs(run_dir), rank_traces(traces)
    summarized = {path for rank, path in by_rank.items() if rank in ranks and _fresh_summary(ranks[rank], path)}
    for path in traces:
        if path not in summarized:  # a rank that analysed its own trace adapted it too: not read here
            _adapt_for_tensorboard(path)
    if ranks:
        analysis = _analyze_ranks(run_dir, ranks, by_rank, jobs)
    else:
        folder = RunFolder(run_dir)
        samples, stacks = _optional(folder.samples, Samples), _optional(folder.stacks, StackSamples)
        trace = load_trace(traces[-1])
        analysis = analyze(Inputs(trace, capture, samples, stacks, peaks=_run_peaks(run_dir, trace)))
    if analysis is not None:
        write_json(RunFolder(run_dir).analysis, analysis)
    return analysis


def _analyze_ranks(run_dir: Path, ranks: dict[int, Path], traces: dict[int, Path],
                   jobs: int = 1) -> Optional[Analysis]:
    """Each rank with its own capture, samples and trace (tb/rankN.*), then the job's view of them all. A rank
    that analysed its own trace where it ran (`diagnose capture`: RUNRANK/analysis.json, newer than the trace)
    is read, not analysed again; the others in `jobs` worker processes."""
    summarized, calls = {}, []
    for rank, folder in ranks.items():
        mine = traces.get(rank)
        if mine is None:
            continue  # a rank that failed before its profiler stopped wrote no trace
        summary = _rank_summary(folder, mine)
        if summary is not None:
            summarized[rank] = (rank, str(mine.relative_to(run_dir)), summary)
        else:
            calls.append((run_dir, rank, folder, mine))
    analysed = {result[0]: result for result in in_workers(_analyze_rank, calls, jobs)}
    analyses = [both[rank] for rank in ranks if rank in (both := {**summarized, **analysed})]
    if not analyses:
        return None
    return analyses[0][2] if len(analyses) == 1 else combine(analyses)[1]


def _analyze_rank(run_dir: Path, rank: int, folder: Path, path: Path) -> tuple[int, str, Analysis]:
    files = RunFolder(folder)
    trace = load_trace(path)
    inputs = Inputs(trace, _optional(files.capture, Capture), _optional(files.samples, Samples),
                    _optional(files.stacks, StackSamples), peaks=_run_peaks(run_dir, trace))
    return rank, str(path.relative_to(run_dir)), analyze(inputs)


def summarize_rank(run_dir: Path, rank: int, folder: Path) -> None:
    """Where a rank ran (`diagnose capture` under the user's torchrun or SLURM): analyse its own trace and keep the
    analysis beside its capture, so that `diagnose report` merges the ranks' analyses instead of reading every
    trace on one machine. Without a trace (the rank failed before its profiler stopped) there is nothing to do."""
    mine = rank_traces(trace_paths(run_dir)).get(rank)
    if mine is not None:
        _adapt_for_tensorboard(mine)  # before the analysis is written: it is then the newer file
        write_json(RunFolder(folder).analysis, _analyze_rank(run_dir, rank, folder, mine)[2])


def _adapt_for_tensorboard(path: Path) -> None:
    """Relabel the DataLoader's spans so TensorBoard's Overview shows the data-loading time we measured; a trace
    big enough to be streamed is left as written (the relabelling reads and rewrites the whole text)."""
    if not text_is_big(path):
        adapt_trace_for_tensorboard(path)


def _rank_summary(folder: Path, trace: Path) -> Optional[Analysis]:
    """The rank's own analysis of `trace`, when it wrote one after the trace and it reads back (else the trace is
    read)."""
    saved = _fresh_summary(folder, trace)
    try:
        return read_json(saved, Analysis) if saved is not None else None
    except UserError:  # damaged, or another version's: the trace itself is read
        return None


def _fresh_summary(folder: Path, trace: Path) -> Optional[Path]:
    saved = RunFolder(folder).analysis
    return saved if saved.exists() and saved.stat().st_mtime >= trace.stat().st_mtime else None


TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(path: Path) -> list[Path]:
    """PATH is one trace file, or a folder of them (one per rank or worker, as tensorboard_trace_handler
    writes them)."""
    if not path.exists():
        raise UserError(f"trace not found: {path}",
                        "pass a torch.profiler trace (.json or .json.gz) or a folder of them")
    if path.is_file():
        return [path]
    if RunFolder(path).tb.is_dir() and not any(path.glob("*.pt.trace.json*")):
        path = RunFolder(path).tb  # a run folder of `diagnose run`
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


def _run_peaks(run_dir: Path, trace: Trace) -> tuple[Peak, ...]:
    """Measured on the machine the run ran on (RUN/peaks.json), and the GPU's datasheet figures."""
    measured = _optional(RunFolder(run_dir).peaks, MachinePeaks)
    name = trace_gpu_name(trace.metadata) if trace.has_gpu else None
    return (measured.peaks if measured is not None else ()) + (datasheet_peaks(name) if name else ())


def _trace_peaks(trace: Trace) -> tuple[Peak, ...]:
    """A trace's GPU by its name: peaks measured on a machine with that GPU (cached by earlier runs here), and its
    datasheet's. A host-only trace names no device whose peak is known."""
    name = trace_gpu_name(trace.metadata) if trace.has_gpu else None
    return (cached_peaks(name) + datasheet_peaks(name)) if name else ()


def _optional(path: Path, cls):
    return read_json(path, cls) if path.exists() else None


def load_capture(run_dir: Path) -> Optional[Capture]:
    if not run_dir.is_dir():
        raise UserError(f"run folder not found: {run_dir}", "pass a folder written by `diagnose run`")
    path = RunFolder(run_dir).capture
    return read_json(path, Capture) if path.exists() else None


def load_run_capture(run_dir: Path) -> Optional[Capture]:
    """A run folder's capture; ranks launched by the user's own launcher (`diagnose capture`) leave theirs
    unmerged: merged here in memory, the folder left as it was (`diagnose report` writes the merge)."""
    from diagnose.capture.rank_files import merged_rank_capture

    return merged_rank_capture(run_dir) if rank_dirs(run_dir) else load_capture(run_dir)
