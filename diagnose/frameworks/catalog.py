"""The Framework record and the catalogue of frameworks diagnose knows: which one owns an object, and how an
optimization is said in its settings."""
from __future__ import annotations

import ast
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
    # optimization ids an experiment applies as the framework's setting (the change the user will make), not by
    # diagnose's own hooks: the framework's loop does the work (logging) or counts with the value (batch, steps)
    applied_as_setting: frozenset[str] = frozenset()
    watched: tuple[str, ...] = ()  # settings whose values the capture records, for the skip reasons and the report
    # optimization id -> (the run's watched settings -> why they already do what it would, else None)
    covered: dict[str, Callable[[dict], Optional[str]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # optimization id -> a comment line under its settings

    def owns(self, obj: Any) -> bool:
        """`obj` is this framework's Trainer (or a subclass the user wrote)."""
        return any(c.__name__ == "Trainer" and c.__module__ in self.trainer_modules for c in type(obj).__mro__)

    def edits(self, optimization: str, setting: dict) -> Optional[Edits]:
        make = self.settings.get(optimization)
        return make(setting) if make else None

    def already(self, optimization: str, current: dict) -> Optional[str]:
        """Why the run's own settings already do what `optimization` would (None: they do not, or unknown)."""
        check = self.covered.get(optimization)
        return check(current) if check else None

    def values(self, optimization: str, setting: dict) -> dict[str, Any]:
        """The edits as the values the configuring call receives (its source text is a literal)."""
        return {k: ast.literal_eval(v) for k, v in (self.edits(optimization, setting) or {}).items()}


def accumulation(setting: dict) -> int:
    """Micro-batches per optimizer step of a grad_accumulation setting, times those the loop already had: a
    framework's setting replaces its count (the generic hook only lets every k-th of the loop's steps through)."""
    return setting.get("micro_batches", 2) * setting.get("accumulating", 1)


LOG_EVERY = 50  # steps between log lines when logging is what slows the loop: Lightning's default


def sparse_logging(interval: str, strategy: Optional[str] = None) -> Callable[[dict], Optional[str]]:
    """The check that a framework's logging is already every LOG_EVERY steps or rarer (or not by steps at all)."""
    def covered(current: dict) -> Optional[str]:
        if strategy and current.get(strategy, "steps") != "steps":
            return f"it logs by {strategy}={current[strategy]!r}, not every few steps"
        try:
            every = float(current[interval])
        except (KeyError, ValueError):
            return None
        if every >= LOG_EVERY or 0 < every < 1:  # under 1: a fraction of the run's steps
            return f"it already logs every {current[interval]} steps ({interval})"
        return None

    return covered


def _registry() -> dict[str, Framework]:
    from diagnose.frameworks import huggingface, lightning  # they import Framework from here

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

