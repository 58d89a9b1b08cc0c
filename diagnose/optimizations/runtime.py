"""What an optimization may change inside the child process, without touching the user's code.

Optimizations register edits here; the capture hooks (diagnose.capture.instrument) call them when the script
builds its DataLoader or optimizer, first calls its model, or calls backward()."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from diagnose.model import Change


@dataclass
class ChangeSet:
    train_loader_location: Optional[str] = None
    loader_edits: list[Callable[[dict], None]] = field(default_factory=list)  # bound DataLoader arguments
    dataset_wrappers: list[Callable[[Any], Any]] = field(default_factory=list)
    optimizer_edits: list[Callable[[dict], None]] = field(default_factory=list)  # the optimizer's defaults
    optimizer_hooks: list[Callable[[Any], None]] = field(default_factory=list)
    model_hooks: list[Callable[[Any], None]] = field(default_factory=list)
    loss_transforms: list[Callable[[Any], Any]] = field(default_factory=list)  # tensor passed to backward()
    start_hooks: list[Callable[[], None]] = field(default_factory=list)
    replay_first_batch: bool = False
    applied: list[str] = field(default_factory=list)  # what actually happened, for the record

    def is_train_loader(self, location: Optional[str], index: int) -> bool:
        if self.train_loader_location is None:
            return index == 0
        return location == self.train_loader_location


def build_change_set(changes: list[Change], train_loader_location: Optional[str]) -> ChangeSet:
    from diagnose.optimizations import REGISTRY

    change_set = ChangeSet(train_loader_location=train_loader_location)
    for change in changes:
        if change.id == "ceiling":
            change_set.replay_first_batch = True
            change_set.applied.append("ceiling: the first batch is replayed from memory, no data loading")
        else:
            REGISTRY[change.id].apply(change.setting, change_set)
    return change_set
