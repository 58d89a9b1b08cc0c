"""Entry point of the child process: `python -m diagnose.capture.child RUN_DIR`."""
from __future__ import annotations

import os
import sys

# `python -m` put the cwd first on sys.path; the script's folder goes there instead (as `python SCRIPT` does).
if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)


def main() -> None:
    from pathlib import Path

    try:
        from diagnose.capture.session import run_child  # imports torch: seconds, and Ctrl-C may land here

        code = run_child(Path(sys.argv[1]).resolve())
    except KeyboardInterrupt:
        code = 130  # interrupted before the script started: nothing to keep, no traceback of ours
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # user threads or DataLoader workers must not keep the process alive


if __name__ == "__main__":
    main()
