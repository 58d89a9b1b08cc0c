"""Experiments stage: try the recommended optimizations on the unchanged script and keep only verified speedups
(stage.py), in timed runs of the script without the profiler (measure.py, in the child process)."""
