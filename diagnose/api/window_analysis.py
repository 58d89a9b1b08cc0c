"""`python -m diagnose.api.window_analysis RUN SCRIPT`: the analysis of a profiled window's traces (RUN/tb, one per
rank) into RUN itself, run by the window's rank 0 in a process of its own while training goes on."""
from __future__ import annotations

import sys


def main(run_dir: str, script: str) -> int:
    from diagnose.commands.analyze import analyze_and_report
    from diagnose.errors import UserError
    from diagnose.record.run_record import RunRecord
    from diagnose.trace import MAX_EVENTS

    record = RunRecord(run_dir)
    try:
        return analyze_and_report(record.files.tb, out=None, into=record.path, script=script, max_events=MAX_EVENTS)[1]
    except UserError as exc:
        print(f"error: {exc.message}\n  {exc.hint}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
