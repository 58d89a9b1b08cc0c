"""The two sides of a comparison: a run folder (from `diagnose run` or `capture`) or traces (as `analyze` takes
them), read into what the comparison needs, or refused with a reason."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from diagnose.analysis.sources import analyze_traces, find_traces
from diagnose.compare.optable import TraceProfile, trace_profile
from diagnose.errors import UserError
from diagnose.model import (
    Analysis,
    Capture,
    CompareSide,
    Finding,
    PlainTiming,
    unprofiled_step_s,
)
from diagnose.record.run_record import RunRecord, is_run_folder
from diagnose.rules import Rule, findings_for

HINT = "pass a run folder (from `diagnose run` or `diagnose capture`), or a trace (.json, .json.gz) or folder of them"


@dataclass(frozen=True)
class LoadedSide:
    side: CompareSide
    analysis: Analysis
    findings: tuple[Finding, ...]
    profile: TraceProfile
    capture: Optional[Capture] = None


def load_side(path: Path, label: str, rules: list[Rule]) -> LoadedSide:
    """Both sides are judged by the same rules, loaded once by the command."""
    if not path.exists():
        raise UserError(f"{label}: {path} not found", HINT)
    if is_run_folder(path):
        return _load_run(RunRecord(path), label, rules)
    traces = find_traces(path)
    analysis = analyze_traces(traces)
    _require_steps(analysis, path, label)
    _require_time(analysis.step_time_s["mean"], path, label)
    trace = _diagnosed_trace(analysis, traces, Path("."))
    profile = trace_profile(trace, len(analysis.steps))
    profiled = analysis.step_time_s["mean"] or 0.0
    side = CompareSide(path=str(path), kind="traces", script="", step_s=profiled, step_basis="profiled",
                       steps=len(analysis.steps), step_cv=_step_cv(analysis), profiled_step_s=profiled,
                       environment=_environment(None, analysis, profile))
    return LoadedSide(side, analysis, tuple(findings_for(analysis, rules)), profile)


def _load_run(record: RunRecord, label: str, rules: list[Rule]) -> LoadedSide:
    run_dir = record.path
    capture = record.run_capture()
    analysis = record.analysis()
    if analysis is None and (capture is None or capture.steps_profiled > 0):
        raise UserError(f"{label}: {run_dir} holds no analysis.json",
                        f"run `diagnose report {run_dir}` to analyse what it captured (ranks captured with "
                        "`diagnose capture` need it too)")
    _require_steps(analysis, run_dir, label, capture)
    traces = record.trace_paths()
    if not traces:
        raise UserError(f"{label}: {run_dir} has no trace in tb/", "pass the run folder as diagnose wrote it")
    profile = trace_profile(_diagnosed_trace(analysis, traces, run_dir), len(analysis.steps))
    window, plain = (capture.unprofiled_window if capture else None), unprofiled_step_s(capture)
    profiled = analysis.step_time_s["mean"] or 0.0
    step_s, basis, steps = (plain, "unprofiled", window.steps) if plain is not None else (profiled, "profiled",
                                                                                            len(analysis.steps))
    _require_time(min(step_s, profiled), run_dir, label)
    noise = _baseline_noise(record)
    blocks = block_noise(window) if plain is not None else None
    side = CompareSide(path=str(run_dir), kind="run", script=capture.script if capture else "", step_s=step_s,
                       step_basis=basis, steps=steps, step_cv=_step_cv(analysis), profiled_step_s=profiled,
                       environment=_environment(capture, analysis, profile),
                       run_noise_sd=noise[0] if noise else None, run_noise_runs=noise[1] if noise else 0,
                       block_noise_sd=blocks[0] if blocks else None, blocks=blocks[1] if blocks else 0)
    return LoadedSide(side, analysis, tuple(findings_for(analysis, rules)), profile, capture)


def _require_steps(analysis: Optional[Analysis], path: Path, label: str, capture: Optional[Capture] = None) -> None:
    if analysis is None or not analysis.steps:
        ended = f" (its capture ended: {capture.status})" if capture is not None else ""
        raise UserError(f"{label}: {path} has no complete training step to compare{ended}",
                        "compare runs or traces that profiled at least one step (its report says what happened)")


def _require_time(step_s: Optional[float], path: Path, label: str) -> None:
    if not step_s or step_s <= 0:
        raise UserError(f"{label}: the steps in {path} last no time at all", "pass a trace whose steps have durations")


def same_script(a: str, b: str) -> bool:
    """Scripts are the same when their file names are (the folders differ between clones and machines); a side
    without a script (traces) matches any."""
    names = [s.replace("\\", "/").rsplit("/", 1)[-1] for s in (a, b)]
    return not all(names) or names[0] == names[1]


def _diagnosed_trace(analysis: Analysis, traces: list[Path], root: Path) -> Path:
    """The trace of the rank the diagnosis is about (the straggler, else the lowest), else the last one."""
    rank = analysis.metrics.get("rank")
    for summary in analysis.ranks:
        if rank is not None and summary.rank == int(rank):
            path = Path(summary.trace)
            return path if path.is_absolute() or path.exists() else root / path
    return traces[-1]


def _step_cv(analysis: Analysis) -> float:
    """On the linear scale: a window's mean of bursty steps (N loader workers deliver N batches at once) varies as
    the steps' std / mean over the root of the steps, however far apart short and long steps lie on a log scale."""
    durations = [s.duration_s for s in analysis.steps]
    if len(durations) < 2:
        return 0.0
    mean = sum(durations) / len(durations)
    return math.sqrt(sum((d - mean) ** 2 for d in durations) / (len(durations) - 1)) / mean if mean > 0 else 0.0


MIN_BLOCKS = 3  # fewer blocks give no spread worth the name
MAX_BLOCKS = 4


def block_noise(window: PlainTiming) -> Optional[tuple[float, int]]:
    """The timed window cut into up to MAX_BLOCKS blocks of whole bursts: the spread (sample std) of the log of
    each block's seconds per step, and how many blocks. A block is a shorter window than the whole, so its spread
    is more than the window's mean has from step to step: it stands, conservatively, for how far the same script's
    step time moves from one run to the next, which no single window can see. None on a GPU: the device is
    synchronised at the window's edges only, so inside it the host's clock times how fast it queues work."""
    if window.device_synced:
        return None
    ends = window.step_ends_s
    bursts = len(ends) // max(window.burst, 1)
    count = min(MAX_BLOCKS, bursts)
    if count < MIN_BLOCKS or len(ends) != window.steps:
        return None
    cuts = [0, *(round(bursts * i / count) * window.burst for i in range(1, count + 1))]
    marks = [0.0, *ends]
    logs = [math.log((marks[hi] - marks[lo]) / (hi - lo)) for lo, hi in zip(cuts, cuts[1:])
            if hi > lo and marks[hi] > marks[lo]]
    if len(logs) < MIN_BLOCKS:
        return None
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)), len(logs)


def _baseline_noise(record: RunRecord) -> Optional[tuple[float, int]]:
    """The spread of the run's own repeated baseline runs (RUN/experiments/NN-baseline): separate processes of
    the same script on the same machine, minutes apart: a measured floor for run-to-run variation."""
    speeds = []
    for timed in record.experiment_runs("*-baseline"):
        try:
            config, measured = timed.config(), timed.measure()
        except (UserError, OSError):
            continue
        if config is None or measured is None or config.measure is None or config.measure.changes:
            continue
        seconds = sum(w.seconds for w in measured.windows)
        if seconds > 0:
            speeds.append(math.log(sum(w.steps for w in measured.windows) / seconds))
    if len(speeds) < 2:
        return None
    mean = sum(speeds) / len(speeds)
    return math.sqrt(sum((x - mean) ** 2 for x in speeds) / (len(speeds) - 1)), len(speeds)


def _environment(capture: Optional[Capture], analysis: Analysis, profile: TraceProfile) -> dict[str, str]:
    """What can explain a difference: versions, device, batch, loader workers, precision, ranks."""
    facts: dict[str, str] = {}
    metrics = analysis.metrics
    if capture is not None:
        env = capture.environment
        facts.update(torch=env.torch, python=env.python, device=env.gpu_name or f"cpu ({env.cpu_count} cores)",
                     arguments=" ".join(capture.script_args) or "(none)",
                     autocast=", ".join(capture.autocast_dtypes) or "off")
        if capture.model is not None:
            facts["model dtype"] = capture.model.dtype
    elif profile.device:
        facts["device"] = profile.device
    for name, metric in (("batch size", "loader_batch_size"), ("loader workers", "loader_num_workers"),
                         ("pinned memory", "loader_pin_memory")):
        if metrics.get(metric) is not None:
            value = metrics[metric]
            facts[name] = ("yes" if value else "no") if name == "pinned memory" else f"{value:g}"
    if profile.world_size:
        facts["world size"] = str(profile.world_size)
    if len(analysis.ranks) > 1:
        facts["ranks analysed"] = str(len(analysis.ranks))
    return facts
