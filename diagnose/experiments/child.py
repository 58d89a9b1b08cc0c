"""Entry point of a timed run's child process (no profiler): `python -m diagnose.experiments.child RUN_DIR`."""
from __future__ import annotations

from pathlib import Path

from diagnose.capture.child import main  # first: it puts the script's folder on sys.path in place of the cwd


def run_timed(run_dir: Path) -> int:
    from diagnose.capture.session import child_paths, progress_writer
    from diagnose.experiments.measure import MeasureSession  # imports torch

    config, files_dir, _, _ = child_paths(run_dir)
    return MeasureSession(config, files_dir, progress_writer()).run()


if __name__ == "__main__":
    main(run_timed)
