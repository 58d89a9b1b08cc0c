"""The catalogue of frameworks diagnose knows (each a module holding a Framework, framework.py): which one owns an
object, and how an optimization is said in its settings."""
from __future__ import annotations

from typing import Any, Optional

from diagnose.frameworks.framework import Edits, Framework


def _registry() -> dict[str, Framework]:
    from diagnose.frameworks import huggingface, lightning

    return {f.name: f for f in (huggingface.FRAMEWORK, lightning.FRAMEWORK)}


FRAMEWORKS: dict[str, Framework] = _registry()


def get(name: Optional[str]) -> Optional[Framework]:
    return FRAMEWORKS.get(name) if name else None


def owner_of(obj: Any) -> Optional[Framework]:
    return next((f for f in FRAMEWORKS.values() if f.owns(obj)), None)


def fix_code(name: str, location: Optional[str], optimizations: tuple[str, ...], metrics: dict,
             current: Optional[dict] = None) -> str:
    """A finding's fix as the framework's settings on the user's configuring call ('' when it has none);
    `current`: the run's watched settings, so a setting that is already there is not suggested."""
    framework = get(name)
    if framework is None:
        return ""
    edits: Edits = {}
    notes: list[str] = []
    for optimization in optimizations:
        if optimization == "optimizer.fused" and metrics.get("optimizer_multi_tensor") == 1:
            continue  # already fused or foreach (recent transformers default to adamw_torch_fused)
        if framework.already(optimization, current or {}):
            continue
        suggest = framework.suggest.get(optimization)
        if suggest is not None and optimization in framework.settings:
            edits.update(framework.edits(optimization, suggest(metrics)) or {})
            notes += [f"# {framework.notes[optimization]}"] if optimization in framework.notes else []
    if not edits:
        return ""
    where = f"at {location}" if location else f"where you build {framework.call}"
    arguments = ", ".join(f"{k}={v}" for k, v in edits.items())
    return "\n".join([f"# {where}: keep your other arguments, add or change these",
                      f"{framework.call}(..., {arguments})", *notes])

