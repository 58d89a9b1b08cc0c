"""Less host work per step: log, print and sync every N steps, not every step."""
from diagnose.optimizations.recommendation import Recommendation
from diagnose.optimizations.registry import register


@register
class ReduceHostWork(Recommendation):
    id = "reduce_host_work"
    title = "Less host work per step"
    why_not_applied = "the host work is the script's own code (the finding names the line)"
    code = "if step % 100 == 0:\n    log_metrics(...)  # was: every step"
