"""What the run's cost needs from the diagnosed process (capture.json's `run_length`, `energy`, `process_start_s`,
`script_to_first_step_s`), gathered from the session at its end in one call, so the session only says where."""
from __future__ import annotations

from typing import Any, Optional

from diagnose.capture import process_start, run_length


def cost_facts(session: Any, micro_per_step: int) -> dict:
    """The Capture fields of the run's cost, from a capture Session (capture/session.py) that has run."""
    instr = session.instr
    rows = list(session.system.rows)  # the sampler still appends: a copy of what it has
    started = getattr(session, "script_started_at", None)
    return dict(
        run_length=run_length.run_length(session.script_loops, _length(_train_loader(instr)), micro_per_step,
                                         instr.steps.source),
        energy=session.energy.readings([(row["t_s"], row.get("power_w")) for row in rows]),
        process_start_s=process_start.seconds(),
        script_to_first_step_s=session.first_step_at - started
        if session.first_step_at is not None and started is not None else None,
    )


def _train_loader(instr) -> Any:
    index = instr.train_loader_index()
    return instr.seen.loaders_alive[index] if index is not None else None


def _length(loader) -> Optional[int]:
    """len() of the training loader; None for a stream (an IterableDataset without one) or no loader."""
    try:
        return len(loader) if loader is not None else None
    except Exception:
        return None
