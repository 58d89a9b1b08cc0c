"""The names of a run folder's files, in one place: only RunRecord (diagnose/record/run_record.py) and the capture
child, which writes its files while the script runs, open them."""
from __future__ import annotations

from pathlib import Path


class _Entry:
    """A name at the top of a run folder; read from a RunFolder, its path there."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, folder, owner=None):
        return self if folder is None else folder.path / self.name


class RunFolder:
    """Where each file diagnose writes lies in a run folder. A rank's folder (ranks/rankN) and a timed run's
    folder (experiments/NN-name) hold some of the same files, so they are RunFolders too."""
    config = _Entry("config.json")  # the RunConfig: what to run and how
    capture = _Entry("capture.json")
    samples = _Entry("samples.json")
    stacks = _Entry("stacks.json")
    analysis = _Entry("analysis.json")
    peaks = _Entry("peaks.json")  # the machine's measured peaks (FLOP/s per dtype, memory bytes/s)
    diagnosis = _Entry("diagnosis.json")
    report = _Entry("report.html")
    report_css = _Entry("report.css")
    experiments = _Entry("experiments.json")
    measure = _Entry("measure.json")  # a timed run's measurement
    launcher = _Entry("launcher.json")  # which rank torchrun saw fail first
    script_log = _Entry("script.log")
    progress_fifo = _Entry("progress.fifo")  # rank 0's progress lines, under torchrun
    tb = _Entry("tb")  # the traces
    ranks = _Entry("ranks")
    sandbox = _Entry("sandbox")  # files the script wrote in the user's folders
    experiment_runs = _Entry("experiments")  # one folder per timed run
    compare = _Entry("compare.json")  # `diagnose run --baseline`: this run against the baseline
    compare_report = _Entry("compare.html")
    live = _Entry("live.json")  # `compare --live`, `run --baseline-ref`: A and B timed taking turns
    live_rounds = _Entry("live")  # their processes' folders, round by round (NN-A, NN-B)
    turns_fifo = _Entry("turns.fifo")  # an interleaved run's turns, from the parent
    sources = _Entry("sources.json")  # the hashes of the user's source files when the run started
    changes = _Entry("changes")  # each measured change as a patch of the user's files (NAME.patch, NAME.md)
    verified_patch = _Entry("verified.patch")  # the verified combination as a patch: what `diagnose apply` writes
    verified_note = _Entry("verified.md")
    analysis_log = _Entry("analysis.log")  # a profiled window's background analysis: its output

    def __init__(self, path):
        self.path = Path(path)

    def rank(self, rank: int) -> Path:
        return self.ranks / f"rank{rank}"


# everything diagnose writes at the top of a run folder (temporary files of atomic writes end in .tmp)
OWN_ENTRIES = frozenset(e.name for e in vars(RunFolder).values() if isinstance(e, _Entry))
HAND_BACKS = "changes.json"  # in changes/, beside the patches: what `diagnose apply` reads
