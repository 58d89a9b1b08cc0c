"""The Framework record and the catalogue of frameworks diagnose knows: which one owns an object, and how an
optimization is said in its settings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

Edits = dict[str, str]  # keyword -> source text


@dataclass(frozen=True)
class Framework:
    name: str
    title: str  # as the report names it
    call: str  # the configuring call, as the user writes it: "TrainingArguments" or "Trainer"
    trainer_modules: tuple[str, ...]  # modules whose `Trainer` class runs the loop
    # (module, class, method): where the user's configuring call is recorded on the object
    stamps: tuple[tuple[str, str, str], ...]
    config_of: Callable[[Any], Any]  # the trainer -> the object whose construction line configures it
    # optimization id -> (setting -> keyword edits on the configuring call); ids absent are the user's own code
    settings: dict[str, Callable[[dict], Edits]] = field(default_factory=dict)
    # optimization id -> (metrics -> a setting to suggest in a finding's fix)
    suggest: dict[str, Callable[[dict], dict]] = field(default_factory=dict)
    builds_loops: bool = True  # builds the DataLoader and optimizer itself: generic DataLoader(...) advice misleads

    def owns(self, obj: Any) -> bool:
        """`obj` is this framework's Trainer (or a subclass the user wrote)."""
        return any(c.__name__ == "Trainer" and c.__module__ in self.trainer_modules for c in type(obj).__mro__)

    def edits(self, optimization: str, setting: dict) -> Optional[Edits]:
        make = self.settings.get(optimization)
        return make(setting) if make else None


def _registry() -> dict[str, Framework]:
    from diagnose.frameworks import huggingface, lightning  # they import Framework from here

    return {f.name: f for f in (huggingface.FRAMEWORK, lightning.FRAMEWORK)}


FRAMEWORKS: dict[str, Framework] = _registry()


def get(name: Optional[str]) -> Optional[Framework]:
    return FRAMEWORKS.get(name) if name else None


def owner_of(obj: Any) -> Optional[Framework]:
    return next((f for f in FRAMEWORKS.values() if f.owns(obj)), None)


def fix_code(name: str, location: Optional[str], optimizations: tuple[str, ...], metrics: dict) -> str:
    """A finding's fix as the framework's settings on the user's configuring call ('' when it has none)."""
    framework = get(name)
    if framework is None:
        return ""
    edits: Edits = {}
    for optimization in optimizations:
        if optimization == "optimizer.fused" and metrics.get("optimizer_multi_tensor") == 1:
            continue  # already fused or foreach (recent transformers default to adamw_torch_fused)
        suggest = framework.suggest.get(optimization)
        if suggest is not None and optimization in framework.settings:
            edits.update(framework.edits(optimization, suggest(metrics)) or {})
    if not edits:
        return ""
    where = f"at {location}" if location else f"where you build {framework.call}"
    arguments = ", ".join(f"{k}={v}" for k, v in edits.items())
    return (f"# {where}: keep your other arguments, add or change these\n"
            f"{framework.call}(..., {arguments})")
