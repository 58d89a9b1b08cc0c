"""The hook contract: what a change may do inside the child process, without touching the user's code.

Optimizations (diagnose.optimizations) fill a ChangeSet; the capture hooks (instrument.py) call its edits when the
script builds its DataLoader, optimizer or DistributedDataParallel, first calls its model, or calls backward();
framework settings are given to the user's configuring call (TrainingArguments(...), Lightning's Trainer(...)) as
it runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class ChangeSet:
    train_loader_location: Optional[str] = None
    loader_edits: list[Callable[[dict], None]] = field(default_factory=list)  # bound DataLoader arguments
    dataset_wrappers: list[Callable[[Any], Any]] = field(default_factory=list)
    optimizer_edits: list[Callable[[dict], None]] = field(default_factory=list)  # the optimizer's defaults
    optimizer_hooks: list[Callable[[Any], None]] = field(default_factory=list)
    model_hooks: list[Callable[[Any], None]] = field(default_factory=list)
    ddp_edits: list[Callable[[dict], None]] = field(default_factory=list)  # bound DistributedDataParallel arguments
    ddp_hooks: list[Callable[[Any], None]] = field(default_factory=list)  # the DistributedDataParallel once built
    fsdp_edits: list[Callable[[dict], None]] = field(default_factory=list)  # keyword arguments of each fully_shard()
    loss_transforms: list[Callable[[Any], Any]] = field(default_factory=list)  # tensor passed to backward()
    start_hooks: list[Callable[[], None]] = field(default_factory=list)
    framework_settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # framework -> setting -> value
    compile_edits: list[Callable[[dict], None]] = field(default_factory=list)  # torch.compile's keyword arguments
    skip_compile: bool = False  # torch.compile and module.compile leave the model as it is (eager)
    replay_first_batch: bool = False
    applied: list[str] = field(default_factory=list)  # what actually happened, for the record

    def is_train_loader(self, location: Optional[str], index: int) -> bool:
        if self.train_loader_location is None:
            return index == 0
        return location == self.train_loader_location
