"""torchrun (torch.distributed.run), with a one-line report instead of its traceback when a rank fails:
`python -m diagnose.capture.launch TORCHRUN_ARGS -m diagnose.capture.child RUN`. The failed rank's own error is
in its output already; which rank failed first (the root cause, when the others fail after it) goes to
RUN/launcher.json."""
from __future__ import annotations

import sys
from typing import Optional

from diagnose.record.run_record import RunRecord


def main(argv: list[str]) -> int:
    from diagnose.capture.orphans import stop_with_parent

    stop_with_parent()  # torchrun stops its ranks on the SIGTERM
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    try:
        run(get_args_parser().parse_args(argv))
    except ChildFailedError as exc:
        first = _first_failure(exc.failures)
        failure = exc.failures[first if first is not None else min(exc.failures)]
        RunRecord(argv[-1]).save_launcher_failure(first, failure.exitcode, sorted(exc.failures))
        print(f"diagnose: {_ranks(exc.failures)} failed with exit code {failure.exitcode} (torchrun stops the "
              "other ranks when one fails)", file=sys.stderr, flush=True)
        return 1
    return 0


def _first_failure(failures: dict) -> Optional[int]:
    """The rank that failed first, where torchrun can tell: a rank without an error file is stamped with the
    whole second torchrun noticed it in (a peer that failed because of it often ties, and get_first_failure then
    names the lowest rank). None when the earliest stamp is shared: the ranks' own errors say which came first."""
    earliest = min(f.timestamp for f in failures.values())
    firsts = [rank for rank, f in failures.items() if f.timestamp == earliest]
    return firsts[0] if len(firsts) == 1 else None


def _ranks(failures: dict) -> str:
    """"rank 1 (local rank 1)", or "ranks 0 and 1" where several failed."""
    if len(failures) == 1:
        [(rank, failure)] = failures.items()
        return f"rank {rank} (local rank {failure.local_rank})"
    ranks = [str(rank) for rank in sorted(failures)]
    return f"ranks {', '.join(ranks[:-1])} and {ranks[-1]}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
