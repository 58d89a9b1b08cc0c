"""`diagnose analyze` begins reading its trace while the rest of diagnose imports; that reading is a value the command
passes down to load_trace, not state left in a module: a trace read with it is the trace read from disk, and it is
never taken for another trace."""
from __future__ import annotations

import numpy as np
from conftest import TRACES

from diagnose.trace import load_trace, prefetch
from diagnose.trace.load import begin_reading

MLP = TRACES / "torch213_cpu" / "mlp_stack_memory.pt.trace.json.gz"
OTHER = TRACES / "cpu_only_with_dataloader.json.gz"


def _summary(trace) -> dict:
    return {"steps": trace.steps.names, "step_ends": np.asarray(trace.steps.end).tolist(),
            "cpu_ops": len(trace.cpu_ops), "memory": len(trace.memory), "flop_ops": len(trace.flop_ops.ts),
            "metadata": trace.metadata}


def test_a_trace_read_ahead_is_the_trace_read_from_disk():
    ahead = begin_reading(MLP, prefetch.start(MLP))
    assert ahead is not None and ahead.reading is not None
    assert _summary(load_trace(MLP, ahead=ahead)) == _summary(load_trace(MLP))


def test_a_reading_begun_ahead_is_never_taken_for_another_trace():
    ahead = begin_reading(MLP, prefetch.start(MLP))
    other = load_trace(OTHER, ahead=ahead)
    assert other.path == str(OTHER) and _summary(other) == _summary(load_trace(OTHER))
    assert _summary(load_trace(MLP)) == _summary(load_trace(MLP, ahead=ahead))  # nothing was used up meanwhile
