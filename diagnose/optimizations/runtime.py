"""Builds the ChangeSet (diagnose.capture.changes) that a timed run applies, from the optimizations' ids."""
from __future__ import annotations

from typing import Optional

import diagnose.frameworks.catalog as frameworks
from diagnose.capture.changes import ChangeSet
from diagnose.frameworks.framework import Framework
from diagnose.model import Change


def build_change_set(changes: list[Change], train_loader_location: Optional[str],
                     framework: Optional[str] = None) -> ChangeSet:
    """Under a framework, a change it has a setting for is applied as that setting (the change the user will
    make, done by the framework's own code); otherwise by the optimization's hooks."""
    from diagnose.optimizations import REGISTRY

    change_set = ChangeSet(train_loader_location=train_loader_location)
    owner = frameworks.get(framework)
    for change in changes:
        if change.id == "ceiling":
            change_set.replay_first_batch = True
            change_set.applied.append("ceiling: the first batch is replayed from memory, no data loading")
        elif owner is not None and change.id in owner.applied_as_setting and owner.edits(change.id, change.setting):
            _apply_as_setting(owner, change, change_set)
        else:
            REGISTRY[change.id].apply(change.setting, change_set)
    return change_set


def _apply_as_setting(framework: Framework, change: Change, change_set: ChangeSet) -> None:
    change_set.framework_settings.setdefault(framework.name, {}).update(framework.values(change.id, change.setting))
    said = ", ".join(f"{k}={v}" for k, v in framework.edits(change.id, change.setting).items())
    change_set.applied.append(f"{framework.call}({said})")
