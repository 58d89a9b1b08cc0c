"""The Framework record: what diagnose knows of one training framework (how to tell its trainer, where its
configuring call is, how each optimization is said in its settings), and the helpers the frameworks' modules share.
The catalogue of them is catalog.py."""
from __future__ import annotations

import ast
from typing import Any, Callable, Optional

from diagnose.lean_dataclass import dataclass, field

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
