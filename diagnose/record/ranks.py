"""What the ranks of a job wrote (ranks/rankN), as one: their captures merged into the run's, their timed runs into
the job's measurement, their energy summed."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional, Sequence

from diagnose.model import Capture, EnergyReading, Hang, Measurement, Status

if TYPE_CHECKING:
    from diagnose.record.run_record import RunRecord

FAILED = (Status.SCRIPT_ERROR, Status.OUT_OF_MEMORY, Status.CRASHED)


def merged_rank_capture(record: RunRecord) -> Optional[Capture]:
    """One capture for the run: the first failed rank's (its error names the rank), else rank 0's; a note for
    every rank that failed or wrote nothing. Nothing is written."""
    ranks = record.ranks()
    captures = {r: c for r, rank in ranks.items() if (c := rank.capture()) is not None}
    if not captures:
        return None
    silent = [r for r in ranks if r not in captures]
    first = record.first_failed_rank()
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


def rank_measurement(record: RunRecord) -> Optional[Measurement]:
    """The job's timed run: rank 0's, timed by its slowest rank's windows (the job steps at that rank's pace; under
    DDP the ranks step in lockstep, so they differ little), or the first failed rank's when one failed. What rank 0
    fed stays rank 0's: the same-data check compares one rank's shard between runs."""
    found = {r: m for r, rank in record.ranks().items() if (m := rank.measure()) is not None}
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


def summed_over_ranks(per_rank: Sequence[tuple[EnergyReading, ...]]) -> tuple[EnergyReading, ...]:
    """Each domain summed over the ranks that read it (each rank its own GPU; the host once per machine), as energy
    per step times the first rank's steps: the ranks step together. A domain some rank could not read is
    unavailable for the job, with that rank's reason."""
    summed = []
    for domain in ("gpu", "host"):
        readings = [r for rank in per_rank for r in rank if r.domain == domain]
        if not readings:
            continue
        first = readings[0]
        missing = next((r for r in readings if r.joules is None or not r.steps), None)
        if missing is not None:
            summed.append(EnergyReading(domain, None, first.seconds, first.steps, "unavailable",
                                        note=missing.note or "a rank measured no steps"))
            continue
        per_step = sum(r.joules / r.steps for r in readings)
        sources = sorted({r.source for r in readings})
        notes = sorted({r.note for r in readings if r.note})
        summed.append(EnergyReading(domain, per_step * first.steps, first.seconds, first.steps, "+".join(sources),
                                    sum(r.devices for r in readings), "; ".join(notes)))
    return tuple(summed)
