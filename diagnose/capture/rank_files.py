"""Parent side of a multi-process capture: after torchrun, merge what the ranks wrote into one capture.json."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Optional

from diagnose.capture.energy import summed_over_ranks
from diagnose.model import Capture, Hang, Measurement, Status
from diagnose.runfolder import RunFolder
from diagnose.serial import read_json, write_json

RANK_DIR = re.compile(r"^rank(\d+)$")
FAILED = (Status.SCRIPT_ERROR, Status.OUT_OF_MEMORY, Status.CRASHED)


def rank_dirs(run_dir: Path) -> dict[int, Path]:
    root = RunFolder(run_dir).ranks
    if not root.is_dir():
        return {}
    found = {int(m.group(1)): p for p in root.iterdir() if (m := RANK_DIR.match(p.name)) and p.is_dir()}
    return dict(sorted(found.items()))


def merge_rank_captures(run_dir: Path) -> Optional[Capture]:
    """The ranks' captures merged (`merged_rank_capture`) and written to RUN/capture.json: done once the job has
    ended, by the launcher's parent or by `diagnose report RUN`, never by a command that only reads."""
    merged = merged_rank_capture(run_dir)
    if merged is not None:
        write_json(RunFolder(run_dir).capture, merged)
    return merged


def merged_rank_capture(run_dir: Path) -> Optional[Capture]:
    """One capture for the run: the first failed rank's (its error names the rank), else rank 0's; a note for
    every rank that failed or wrote nothing. Nothing is written."""
    captures = {r: read_json(RunFolder(d).capture, Capture) for r, d in rank_dirs(run_dir).items()
                if RunFolder(d).capture.exists()}
    if not captures:
        return None
    silent = [r for r in rank_dirs(run_dir) if r not in captures]
    first = _first_failed(run_dir)
    # the rank whose own error ended the job: not one that failed because a peer had gone, then torchrun's first
    failed = sorted((r for r, c in captures.items() if c.status in FAILED),
                    key=lambda r: (_failed_for_a_peer(captures[r]), r != first))
    chosen = failed[0] if failed else min(captures)
    capture = captures[chosen]
    notes = [f"rank {r}: {c.status}" + (f" ({c.error.type}: {c.error.message})" if c.error else "")
             + (f" {hang_line(c.hang)}" if c.hang else "")
             for r, c in captures.items() if r != chosen and c.status not in (Status.COMPLETED, Status.SCRIPT_FINISHED)]
    notes += [f"rank {r} wrote no results (stopped by the launcher before it could)" for r in silent]
    if capture.error is not None:
        capture = replace(capture, error=replace(capture.error, message=f"rank {chosen}: {capture.error.message}"))
    if capture.hang is not None:  # every rank's place: the one that is not in the collective is the cause
        others = tuple(f"rank {r}: " + (hang_line(c.hang) if c.hang else f"{c.status} after {c.steps_seen} steps")
                       for r, c in captures.items() if r != chosen)
        capture = replace(capture, hang=replace(capture.hang, ranks=others))
    return replace(capture, notes=capture.notes + tuple(notes), ranks=tuple(captures),
                   energy=summed_over_ranks([c.energy for c in captures.values()]))


def hang_line(hang: Hang) -> str:
    """'at train.py:16 in read_next_shard (time.sleep(3600)), waiting on a sleep'"""
    where = hang.place()
    return f"{where}, waiting on {hang.waiting_on}" if where else f"waiting on {hang.waiting_on}"


# what a rank's collective says when another rank died under it (gloo, NCCL): a consequence, not the cause
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote process exited",
             "NCCL communicator was aborted")


def _failed_for_a_peer(capture) -> bool:
    return capture.error is not None and any(marker in capture.error.message for marker in PEER_GONE)


def _first_failed(run_dir: Path) -> Optional[int]:
    """The rank torchrun saw fail first (None where it could not tell): the others may fail after it."""
    try:
        return int(json.loads(RunFolder(run_dir).launcher.read_text())["first_failed_rank"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def rank_measurement(folder: Path) -> Optional[Measurement]:
    """The job's timed run: rank 0's, timed by its slowest rank's windows (the job steps at that rank's pace; under
    DDP the ranks step in lockstep, so they differ little), or the first failed rank's when one failed. What rank 0
    fed stays rank 0's: the same-data check compares one rank's shard between runs."""
    found = {r: read_json(RunFolder(d).measure, Measurement) for r, d in rank_dirs(folder).items()
             if RunFolder(d).measure.exists()}
    if not found:
        return None
    failed = [m for m in found.values() if m.status in FAILED]
    if failed:
        return failed[0]
    first, slowest = found[min(found)], found[max(sorted(found), key=lambda r: _seconds_per_step(found[r]))]
    return replace(first, windows=slowest.windows, restart_steps_s=slowest.restart_steps_s)


def _seconds_per_step(measurement: Measurement) -> float:
    steps = sum(w.steps for w in measurement.windows)
    return sum(w.seconds for w in measurement.windows) / steps if steps else 0.0
