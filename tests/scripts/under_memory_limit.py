"""Run a script plainly under a memory limit, as `diagnose run --memory-limit` sets it on the host: the address
space may grow by LIMIT bytes from where it stood once torch was imported. Exit 5 when the script runs out of
memory, as diagnose reports it. Usage: python under_memory_limit.py LIMIT_BYTES script.py [args...]"""
import resource
import runpy
import sys

import psutil
import torch  # noqa: F401  (imported before the limit, as in diagnose's child)


def main():
    limit, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    start = psutil.Process().memory_info().vms
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (start + limit, hard))
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc):
            print(f"out of memory: {exc}", file=sys.stderr)
            sys.exit(5)
        raise


if __name__ == "__main__":
    main()
