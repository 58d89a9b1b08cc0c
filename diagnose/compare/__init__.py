"""Compare stage: two runs or traces of a training script, B against A (`diagnose compare`, `run --baseline`).
It reads what the earlier stages wrote (analysis, findings, traces) and says what changed and whether the
change in step time is beyond the noise; the report stage renders it."""
