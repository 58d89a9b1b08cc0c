"""torchrun (torch.distributed.run), with a one-line report instead of its traceback when a rank fails:
`python -m diagnose.capture.launch TORCHRUN_ARGS -m diagnose.capture.child RUN`. The failed rank's own error is
in its output already; which rank failed first (the root cause, when the others fail after it) goes to
RUN/launcher.json."""
from __future__ import annotations

import json
import sys

from diagnose.runfolder import RunFolder


def main(argv: list[str]) -> int:
    from diagnose.capture.orphans import stop_with_parent

    stop_with_parent()  # torchrun stops its ranks on the SIGTERM
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    try:
        run(get_args_parser().parse_args(argv))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        RunFolder(argv[-1]).launcher.write_text(json.dumps({"first_failed_rank": rank, "exitcode": failure.exitcode}))
        print(f"diagnose: rank {rank} (local rank {failure.local_rank}) failed with exit code "
              f"{failure.exitcode}; torchrun stopped the other ranks", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
