"""diagnose's children stop when diagnose dies, even by SIGKILL: left running, a child would go on changing the
user's files with nobody left to put them back. Called first thing in the child (not in Popen's preexec_fn,
which is unsafe in a parent with threads)."""
from __future__ import annotations

import os
import signal
import sys

PARENT_ENV = "DIAGNOSE_PARENT_PID"  # set by the parent in the child's environment
PR_SET_PDEATHSIG = 1


def stop_with_parent() -> None:
    """Linux: SIGTERM (which stops the script as a deadline does) when the parent dies. The variable is taken out of
    the environment first: the processes this one starts (torchrun's ranks) have another parent."""
    parent = os.environ.pop(PARENT_ENV, None)
    if not parent or not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the parent died before the call: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)
