"""A run folder's one owner: each file diagnose keeps in it loaded and saved as its typed record, the ranks' and the
timed runs' folders as records of their own, and the checks that keep the user's files from being overwritten.

A file the run has not written loads as None; a damaged one (cut short, edited by hand, another version's) is a
UserError that says so. Every save is atomic (serial.write_json: a temporary file, then a rename)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Optional, TypeVar

from diagnose.errors import UserError
from diagnose.model import (
    Analysis,
    Capture,
    Comparison,
    Diagnosis,
    ExperimentResults,
    HandBacks,
    LiveComparison,
    MachinePeaks,
    Measurement,
    RunConfig,
    Samples,
    SourceFiles,
    StackSamples,
)
from diagnose.record.layout import HAND_BACKS, OWN_ENTRIES, RunFolder
from diagnose.serial import read_json, write_json

T = TypeVar("T")
RANK_DIR = re.compile(r"^rank(\d+)$")  # ranks/rankN
RANK_TRACE = re.compile(r"rank(\d+)\.")  # tb/rankN.<worker>.pt.trace.json: the trace handler's name, rank first
TRACES = "*.pt.trace.json*"


class RunRecord:
    """A run folder (`diagnose run`, `capture`, `analyze --out`), a rank's folder in it (ranks/rankN) or a timed
    run's (experiments/NN-name): they hold some of the same files, so each is a RunRecord."""

    def __init__(self, path):
        self.path = Path(path)
        self.files = RunFolder(self.path)  # the paths of the files others stream into: logs, traces, HTML, patches

    @classmethod
    def existing(cls, path) -> RunRecord:
        """A folder to read: a UserError when it is not there."""
        record = cls(path)
        if not record.path.is_dir():
            raise UserError(f"run folder not found: {record.path}", "pass a folder written by `diagnose run`")
        return record

    def __repr__(self) -> str:
        return f"RunRecord({str(self.path)!r})"

    def config(self) -> Optional[RunConfig]:
        return _load(self.files.config, RunConfig)

    def save_config(self, config: RunConfig) -> Path:
        return _save(self.files.config, config)

    def has_config(self) -> bool:
        return self.files.config.exists()

    def has_capture(self) -> bool:
        return self.files.capture.exists()

    def capture(self) -> Optional[Capture]:
        return _load(self.files.capture, Capture)

    def save_capture(self, capture: Capture) -> Path:
        return _save(self.files.capture, capture)

    def samples(self) -> Optional[Samples]:
        return _load(self.files.samples, Samples)

    def save_samples(self, samples: Samples) -> Path:
        return _save(self.files.samples, samples)

    def stacks(self) -> Optional[StackSamples]:
        return _load(self.files.stacks, StackSamples)

    def save_stacks(self, stacks: StackSamples) -> Path:
        return _save(self.files.stacks, stacks)

    def peaks(self) -> Optional[MachinePeaks]:
        return _load(self.files.peaks, MachinePeaks)

    def save_peaks(self, peaks: MachinePeaks) -> Path:
        return _save(self.files.peaks, peaks)

    def analysis(self) -> Optional[Analysis]:
        return _load(self.files.analysis, Analysis)

    def save_analysis(self, analysis: Analysis) -> Path:
        return _save(self.files.analysis, analysis)

    def experiments(self) -> Optional[ExperimentResults]:
        return _load(self.files.experiments, ExperimentResults)

    def save_experiments(self, results: ExperimentResults) -> Path:
        return _save(self.files.experiments, results)

    def diagnosis(self) -> Optional[Diagnosis]:
        return _load(self.files.diagnosis, Diagnosis)

    def has_diagnosis(self) -> bool:
        return self.files.diagnosis.exists()

    def save_diagnosis(self, diagnosis: Diagnosis) -> Path:
        return _save(self.files.diagnosis, diagnosis)

    def measure(self) -> Optional[Measurement]:
        return _load(self.files.measure, Measurement)

    def job_measurement(self) -> Optional[Measurement]:
        """A timed run's measurement: its own, or its ranks' as the job's (`rank_measurement`)."""
        from diagnose.record.ranks import rank_measurement

        measured = self.measure()
        return measured if measured is not None else rank_measurement(self)

    def save_measure(self, measurement: Measurement) -> Path:
        return _save(self.files.measure, measurement)

    def sources(self) -> Optional[SourceFiles]:
        return _load(self.files.sources, SourceFiles)

    def save_sources(self, sources: SourceFiles) -> Path:
        return _save(self.files.sources, sources)

    def comparison(self) -> Optional[Comparison]:
        return _load(self.files.compare, Comparison)

    def save_comparison(self, comparison: Comparison) -> Path:
        return _save(self.files.compare, comparison)

    def live(self) -> Optional[LiveComparison]:
        return _load(self.files.live, LiveComparison)

    def save_live(self, comparison: LiveComparison) -> Path:
        return _save(self.files.live, comparison)

    def report_path(self) -> Optional[Path]:
        """report.html, when one was written."""
        return self.files.report if self.files.report.exists() else None

    def compare_report_path(self) -> Optional[Path]:
        return self.files.compare_report if self.files.compare_report.exists() else None

    def save_report(self, html: str) -> Path:
        """report.html, whole or not at all: a reader never sees half a report."""
        return _save_text(self.files.report, html)

    def save_compare_report(self, html: str) -> Path:
        return _save_text(self.files.compare_report, html)

    def hand_backs(self) -> Optional[HandBacks]:
        """The measured changes as patches of the user's files (changes/changes.json): what `diagnose apply` reads."""
        return _load(self.files.changes / HAND_BACKS, HandBacks)

    def save_hand_backs(self, hand_backs: HandBacks) -> Path:
        return _save(self.files.changes / HAND_BACKS, hand_backs)

    def change_paths(self, name: str) -> tuple[Path, Path]:
        """Where a measured change's patch and its note go (changes/NAME.patch, NAME.md)."""
        return self.files.changes / f"{name}.patch", self.files.changes / f"{name}.md"

    def verified_paths(self) -> tuple[Path, Path]:
        """The verified change's patch and note: at the top of the folder, where the user looks first."""
        return self.files.verified_patch, self.files.verified_note

    def drop_capture(self) -> None:
        """What a capture attempt wrote and the next attempt writes again: its capture (a second attempt that dies
        before writing its own must not be read as this one), samples, traces and ranks' folders."""
        for path in (self.files.capture, self.files.samples, self.files.stacks, self.files.launcher):
            path.unlink(missing_ok=True)
        for path in (self.files.tb, self.files.ranks):
            shutil.rmtree(path, ignore_errors=True)

    def script_log(self) -> str:
        """What the script printed (script.log), "" when it printed nothing or never started."""
        log = self.files.script_log
        return log.read_text(errors="replace") if log.exists() else ""

    def first_failed_rank(self) -> Optional[int]:
        """The rank torchrun saw fail first (None where it could not tell): the others may fail after it."""
        try:
            return int(json.loads(self.files.launcher.read_text())["first_failed_rank"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save_launcher_failure(self, first_failed_rank: Optional[int], exitcode: int, failed_ranks: list[int]) -> Path:
        return _save_text(self.files.launcher, json.dumps({"first_failed_rank": first_failed_rank,
                                                           "exitcode": exitcode, "failed_ranks": failed_ranks}))

    def rank(self, rank: int) -> RunRecord:
        """The folder of one rank of a job launched by torchrun or the user's launcher (ranks/rankN)."""
        return RunRecord(self.files.rank(rank))

    def ranks(self) -> dict[int, RunRecord]:
        """The ranks' folders there are, by rank; none for a run of one process."""
        root = self.files.ranks
        if not root.is_dir():
            return {}
        found = {int(m.group(1)): RunRecord(p) for p in root.iterdir() if (m := RANK_DIR.match(p.name)) and p.is_dir()}
        return dict(sorted(found.items()))

    def run_capture(self) -> Optional[Capture]:
        """The run's capture; ranks launched by the user's own launcher (`diagnose capture`) leave theirs unmerged:
        merged here in memory, the folder left as it was (`merge_rank_captures` writes the merge)."""
        from diagnose.record.ranks import merged_rank_capture

        return merged_rank_capture(self) if self.ranks() else self.capture()

    def merge_rank_captures(self) -> Optional[Capture]:
        """The ranks' captures merged and saved as the run's: done once the job has ended, by the launcher's parent
        or by `diagnose report RUN`, never by a command that only reads. A run of one process: its capture."""
        from diagnose.record.ranks import merged_rank_capture

        if not self.ranks():
            return self.capture()
        merged = merged_rank_capture(self)
        if merged is not None:
            self.save_capture(merged)
        return merged

    def trace_paths(self) -> list[Path]:
        """The profiler's traces (tb/), sorted; a trace still being written (.tmp) is not one yet."""
        return sorted(p for p in self.files.tb.glob(TRACES) if not p.name.endswith(".tmp"))

    def rank_trace_paths(self) -> dict[int, Path]:
        """Each rank's trace, by rank: the last when a rank wrote several."""
        return rank_traces(self.trace_paths())

    def has_traces_folder(self) -> bool:
        return self.files.tb.is_dir()

    def fresh_analysis(self, trace: Path) -> Optional[Analysis]:
        """The analysis saved here after `trace` was written (a rank's own, where it ran), when it reads back;
        else None and the trace is to be read."""
        if not self.analysis_is_fresh(trace):
            return None
        try:
            return self.analysis()
        except UserError:  # damaged, or another version's: the trace itself is read
            return None

    def analysis_is_fresh(self, trace: Path) -> bool:
        saved = self.files.analysis
        return saved.exists() and saved.stat().st_mtime >= trace.stat().st_mtime

    def experiment_runs(self, pattern: str = "*") -> list[RunRecord]:
        """The timed runs' folders (experiments/NN-name) whose names match `pattern`, in their order."""
        return [RunRecord(p) for p in sorted(self.files.experiment_runs.glob(pattern)) if p.is_dir()]

    def outermost(self) -> RunRecord:
        """The run folder this one lies in when it is a timed run's (experiments/NN-name) or a rank's
        (ranks/rankN), else itself: the whole of it is diagnose's own."""
        top = self.path.resolve()
        while top.parent.name in (RunFolder.experiment_runs.name, RunFolder.ranks.name) and RunRecord(
                top.parent.parent).has_config():
            top = top.parent.parent
        return RunRecord(top)

    def is_run(self) -> bool:
        """A folder diagnose ran a script in: its own config.json, beside the run's sandbox or script.log."""
        if not self.files.config.is_file():
            return False
        if not (self.files.sandbox.is_dir() or self.files.script_log.is_file()):
            return False
        return self.has_own_config()

    def has_own_config(self) -> bool:
        """config.json as diagnose writes it (a RunConfig), not some other program's config.json: what makes a
        folder diagnose's own."""
        try:
            return self.config() is not None
        except Exception:  # unreadable, or another program's file: not ours either way
            return False

    def foreign_entries(self) -> list[str]:
        """Names at the top of the folder that diagnose did not write: the commands that write into an existing
        folder (`report`, `capture` under the user's launcher) refuse one that has any, so the user's files are
        never overwritten."""
        if not self.path.is_dir():
            return []
        names = sorted(p.name for p in self.path.iterdir()
                       if p.name not in OWN_ENTRIES and not p.name.endswith(".tmp"))  # .tmp: an atomic write's
        if self.files.config.exists() and not self.has_own_config():
            names.insert(0, RunFolder.config.name)
        return names


def rank_traces(traces: list[Path]) -> dict[int, Path]:
    """Each rank's trace among `traces` (sorted), by rank: the last when a rank wrote several."""
    found = {}
    for path in traces:
        match = RANK_TRACE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _load(path: Path, cls: type[T]) -> Optional[T]:
    return read_json(path, cls) if path.exists() else None


def _save(path: Path, record: Any) -> Path:
    write_json(path, record)
    return path


def _save_text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def is_run_folder(path: Path) -> bool:
    """A folder diagnose wrote (its own config.json), as opposed to a folder of the user's traces."""
    return path.is_dir() and RunRecord(path).has_own_config()
