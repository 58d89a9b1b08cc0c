"""`diagnose capture`: one rank of a job the user launches (torchrun, srun), into a shared run folder."""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from diagnose.analysis.sources import analyze_own_trace
from diagnose.capture.runner import check_script
from diagnose.errors import UserError
from diagnose.model import RunConfig
from diagnose.record.run_record import RunRecord


def capture_command(config: RunConfig) -> int:
    """This process is one rank of a job the user launched (torchrun, srun...): run the capture in it, writing
    into the shared folder OUT (RUN/ranks/rankN and RUN/tb/rankN.*); `diagnose report OUT` merges them."""
    from diagnose.capture.session import DISTRIBUTED_ENV, current_rank, run_child

    check_script(config.script)
    os.environ[DISTRIBUTED_ENV] = "1"
    run_dir = Path(config.out_dir).resolve()
    rank = current_rank()
    record = RunRecord(run_dir)
    mine = record.rank(rank) if rank is not None else record
    if mine.has_capture():
        raise UserError(f"{mine.path} already holds a capture", "pass a new --out folder for each job")
    foreign = record.foreign_entries()  # ranks share OUT, so it may hold other ranks' files, but only ours
    if foreign:
        raise UserError(f"--out {run_dir} holds files diagnose did not write: {', '.join(foreign[:5])}",
                        "pass a new or empty folder for each job")
    run_dir.mkdir(parents=True, exist_ok=True)
    config = replace(config, out_dir=str(run_dir))
    if not record.has_config() or rank in (None, 0):
        record.save_config(config)  # every rank writes the same config; the write is atomic
    code = run_child(run_dir)
    if rank is not None:
        _summarize(record, rank)
    if rank in (None, 0):
        print(f"diagnose: this rank's capture is in {mine.path}; once every rank has finished, analyse them all with: "
              f"diagnose report {run_dir}", file=sys.stderr, flush=True)
    return code


def _summarize(record: RunRecord, rank: int) -> None:
    """This rank's analysis, written where it ran; `diagnose report` reads the trace when it is missing, so a
    failure here only costs the report that time: said, never the rank's exit code."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the capture ignored them while writing its files: the
    signal.signal(signal.SIGINT, signal.default_int_handler)  # launcher must still be able to stop the analysis
    try:
        _analyse_own_trace(record, rank)
    except Exception as exc:  # noqa: BLE001 - the rank's own results must stand whatever the analysis meets
        print(f"diagnose: rank {rank} could not analyse its trace ({type(exc).__name__}: {exc}); "
              "`diagnose report` will read it", file=sys.stderr, flush=True)


def _analyse_own_trace(record: RunRecord, rank: int) -> None:
    """The rank's own trace analysed where it ran and kept beside its capture, so that `diagnose report` merges the
    ranks' analyses instead of reading every trace on one machine. Without a trace (the rank failed before its
    profiler stopped) there is nothing to do. Relabelled for TensorBoard first: the analysis is then the newer file,
    which is how `diagnose report` knows it is the trace's."""
    from diagnose.commands.pipeline import relabel_for_tensorboard

    mine = record.rank_trace_paths().get(rank)
    if mine is not None:
        relabel_for_tensorboard([mine])
        record.rank(rank).save_analysis(analyze_own_trace(record, rank, mine))
