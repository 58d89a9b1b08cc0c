"""Entry point of the profiled child process: `python -m diagnose.capture.child RUN_DIR`; main() also serves
the timed runs' entry (diagnose.experiments.child)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

ENTERED_AT = time.time()  # the interpreter has started (wall clock: the process's start is the kernel's wall time)

# `python -m` put the cwd first on sys.path; the script's folder goes there instead (as `python SCRIPT` does).
if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)


def main(run: Optional[Callable[[Path], int]] = None) -> None:
    from diagnose.capture.orphans import stop_with_parent

    stop_with_parent()
    try:
        if run is None:
            from diagnose.capture.process_start import import_torch_timed

            import_torch_timed(ENTERED_AT)
            from diagnose.capture.session import run_child as run  # imports torch: seconds, and Ctrl-C may land here

        code = run(Path(sys.argv[1]).resolve())
    except KeyboardInterrupt:
        code = 130  # interrupted before the script started: nothing to keep, no traceback of ours
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # user threads or DataLoader workers must not keep the process alive


if __name__ == "__main__":
    main()
