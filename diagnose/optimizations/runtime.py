"""Builds the ChangeSet (diagnose.capture.changes) that a timed run applies, from the optimizations' ids."""
from __future__ import annotations

from typing import Optional

from diagnose.capture.changes import ChangeSet
from diagnose.model import Change


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
