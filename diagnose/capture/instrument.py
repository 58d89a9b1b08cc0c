"""Hooks installed into torch before the user's script runs: step boundaries and where things were made.

Step boundaries, in order of preference (a higher source, once seen, silences lower ones):
  manual (diagnose.step()) > dataloader (start of next() on the training loader) > backward > optimizer.
The start of next() is the natural boundary: the wait for data belongs to the step that waits.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.optim.optimizer as optimizer_module
import torch.utils.data.dataloader as dl_module

from diagnose import step_hook
from diagnose.capture import ddp_watch, frameworks, fsdp_watch, worker_stacks
from diagnose.capture.changes import ChangeSet
from diagnose.capture.dynamo import DynamoWatch
from diagnose.capture.sites import class_location, user_location
from diagnose.model import FrameworkSite, LoaderInfo, ModelInfo, OptimizerInfo

PRIORITY = {"optimizer": 0, "backward": 1, "dataloader": 2, "manual": 3}


class StopCapture(BaseException):
    """Raised at a step boundary to end the user's script; BaseException so `except Exception` lets it pass."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Observed:
    """Mutable record of what the hooks saw; turned into frozen records when the capture ends."""
    loaders: list[LoaderInfo] = field(default_factory=list)
    loaders_alive: list = field(default_factory=list)  # the DataLoader objects, kept for the dataset probe
    iterators: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # live DataLoader iterators: their workers
    batches_drawn: list[int] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)  # time in next() per loader while timing
    train_loader: Optional[int] = None
    optimizers: list[OptimizerInfo] = field(default_factory=list)
    optimizers_alive: list = field(default_factory=list)  # the optimizer objects, for their state's size
    root_module: Optional[torch.nn.Module] = None  # kept alive: runpy drops the script's globals
    counters: dict[str, int] = field(default_factory=dict)
    autocast_dtypes: set[str] = field(default_factory=set)  # of the enabled autocast regions entered
    framework: Optional[FrameworkSite] = None  # the training framework seen running the script's loop

    def train_loader_or_first(self) -> Optional[int]:
        return self.train_loader if self.train_loader is not None else (0 if self.loaders else None)

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1


class StepBoundaries:
    """Counts step boundaries from the best source seen and calls `on_boundary(step_index)`. A step is an optimizer
    step once one has been seen (as Hugging Face Trainer, Lightning and nanoGPT count steps): the data loader's and
    backward()'s signals then start a step only when an optimizer stepped since the last boundary, so with gradient
    accumulation one step spans its micro-batches (their data waits, forwards and backwards, then the update)."""
    MICRO = ("dataloader", "backward")  # one signal per micro-batch
    # Until the first optimizer step, a script that built an optimizer may be accumulating: its micro-batches are
    # not counted as steps (the warm-up would end, the FLOPs be counted, on a micro-batch), at most this many
    # (an optimizer built and never stepped).
    MAX_UNSETTLED = 64

    def __init__(self, on_boundary: Callable[[int], None], optimizer_built: Callable[[], bool] = lambda: False):
        self.on_boundary = on_boundary
        self.optimizer_built = optimizer_built
        self.unsettled = 0
        self.source: Optional[str] = None
        self.boundaries = 0
        self.optimizer_seen = False
        self.stepped = False  # an optimizer stepped since the last boundary
        self.micro = 0  # micro-batches of the step under way
        self.micro_per_step: list[int] = []  # of each step ended, in order (1 where the source has no micro-batches)

    def optimizer_stepped(self) -> None:
        self.optimizer_seen = self.stepped = True

    def signal(self, source: str) -> None:
        if self.source is not None and PRIORITY[source] < PRIORITY[self.source]:
            return
        if source in self.MICRO and source == self.source and self.optimizer_seen and not self.stepped:
            self.micro += 1  # another micro-batch of the same optimizer step
            return
        if (source in self.MICRO and not self.optimizer_seen and self.unsettled < self.MAX_UNSETTLED
                and self.optimizer_built()):
            self.unsettled += 1  # before the first optimizer step: how many micro-batches make a step is unknown
            self.source = source
            return
        if self.boundaries:
            self.micro_per_step.append(max(self.micro, 1))
        self.source, self.stepped, self.micro = source, False, 1 if source in self.MICRO else 0
        self.boundaries += 1
        self.on_boundary(self.boundaries)


def _loader_info(loader, location: Optional[str], framework: Optional[str]) -> LoaderInfo:
    batch_size = loader.batch_size
    if batch_size is None and getattr(loader, "batch_sampler", None) is not None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    try:
        dataset_len = len(loader.dataset)
    except Exception:  # iterable datasets have no len
        dataset_len = None
    return LoaderInfo(
        location=location,
        batch_size=batch_size,
        num_workers=int(loader.num_workers),
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor,
        dataset_type=type(loader.dataset).__name__,
        dataset_len=dataset_len,
        framework=framework,
        dataset_kind="iterable" if isinstance(loader.dataset, torch.utils.data.IterableDataset) else "map",
    )


class Instrumentation:
    def __init__(self, on_boundary: Callable[[int], None], changes: Optional[ChangeSet] = None,
                 on_batch: Optional[Callable[[Any], None]] = None, on_loss: Optional[Callable[[Any], None]] = None,
                 on_epoch: Optional[Callable[[Any], None]] = None):
        self.seen = Observed()
        self.dynamo = DynamoWatch()  # what torch.compile does, step by step

        def boundary(count: int) -> None:
            self.dynamo.on_step(count - 1)
            on_boundary(count)

        self.steps = StepBoundaries(boundary, optimizer_built=lambda: bool(self.seen.optimizers))
        self.changes = changes or ChangeSet()
        self.on_batch, self.on_loss, self.on_epoch = on_batch, on_loss, on_epoch
        self._undo: list[Callable[[], None]] = []
        self._module_depth = 0
        self._global_module_hooks: list[Callable[[], None]] = []
        self._replayed: dict[int, Any] = {}
        self._pid, self._main_ident = os.getpid(), threading.main_thread().ident
        self.timing = False  # measure the time in each loader's next() (during the profiled window)
        self.worker_stack_folder: Optional[Path] = None  # set: DataLoader workers dump their stacks there on a hang
        self.ddp = ddp_watch.DdpWatch()
        self.fsdp = fsdp_watch.FsdpWatch()

    # -- install / remove -------------------------------------------------------------------------
    def install(self) -> None:
        self._patch(torch.utils.data.DataLoader, "__init__", self._wrap_loader_init)
        self._patch(torch.utils.data.DataLoader, "__iter__", self._wrap_loader_iter)
        self._patch(dl_module._BaseDataLoaderIter, "__next__", self._wrap_next)
        self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
        self._patch(torch.autograd, "backward", self._wrap_backward)
        self._patch(torch.nn.DataParallel, "__init__", self._wrap_counter("data_parallel"))
        self._patch(torch.cuda, "empty_cache", self._wrap_counter("empty_cache_calls"))
        ddp_watch.install(self.ddp, self.changes, self.in_main_thread, self._patch)
        self._undo.append(fsdp_watch.install(self.fsdp, self.changes))
        # torch.cuda.amp.autocast and torch.cpu.amp.autocast subclass torch.autocast and enter through it
        self._patch(torch.autocast, "__enter__", self._wrap_autocast_enter)
        handle = optimizer_module.register_optimizer_step_post_hook(self._after_optimizer_step)
        pre_step = optimizer_module.register_optimizer_step_pre_hook(self._before_optimizer_step)
        self._undo += [handle.remove, pre_step.remove]
        pre = torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward)
        post = torch.nn.modules.module.register_module_forward_hook(self._after_forward)
        self._global_module_hooks = [pre.remove, post.remove]
        self._undo.append(self._remove_global_module_hooks)
        self._undo.append(self.dynamo.install())
        self._patch(torch, "compile", self._wrap_compile)
        self._patch(torch.nn.Module, "compile", self._wrap_module_compile)
        saved_filters = warnings.filters[:]
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        self._undo.append(lambda: setattr(warnings, "filters", saved_filters))
        self._undo.append(frameworks.install(self.changes.framework_settings))
        step_hook.hook = lambda: self.steps.signal("manual")
        for start in self.changes.start_hooks:
            start()

    def uninstall(self) -> None:
        step_hook.hook = None
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def site(self, frame, obj, loader: bool = False) -> tuple[Optional[str], Optional[str]]:
        """(location, framework) of a DataLoader or optimizer made by the call in `frame`: the user's line, or,
        when a framework made it, where the loader it re-makes was made or the line that configures the framework."""
        found = frameworks.site(frame)
        if found is not None and self.seen.framework is None:
            self.seen.framework = found
        if not frameworks.built_by_framework(frame, obj):
            return user_location(frame), None
        old = frameworks.remade_from(frame, torch.utils.data.DataLoader) if loader else None
        if old is not None:
            info = self.seen.loaders[old._diagnose_index]
            return info.location, info.framework
        if found is not None and found.location:
            return found.location, found.name
        return user_location(frame), None

    def _patch(self, owner, name: str, make_wrapper) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make_wrapper(original))
        self._undo.append(lambda: setattr(owner, name, original))

    # -- wrappers -----------------------------------------------------------------------------------
    def _wrap_loader_init(self, original):
        seen, instr = self.seen, self

        changes = self.changes
        signature = inspect.signature(original)

        @functools.wraps(original)
        def init(loader, *args, **kwargs):
            location, framework = instr.site(sys._getframe(1), loader, loader=True)
            if changes.loader_edits and changes.is_train_loader(location, len(seen.loaders)):
                arguments = signature.bind(loader, *args, **kwargs).arguments
                for edit in changes.loader_edits:
                    edit(arguments)
                original(**arguments)
            else:
                original(loader, *args, **kwargs)
            if getattr(loader, "_diagnose_index", None) is None:  # subclasses call __init__ once each
                loader._diagnose_index = len(seen.loaders)
                seen.loaders.append(_loader_info(loader, location, framework))
                seen.loaders_alive.append(loader)
                if instr.worker_stack_folder is not None:
                    worker_stacks.watch(loader, instr.worker_stack_folder)
                seen.batches_drawn.append(0)
                seen.wait_s.append(0.0)

        return init

    def _wrap_loader_iter(self, original):
        instr = self

        @functools.wraps(original)
        def iterate(loader):
            iterator = original(loader)
            iterator._diagnose_index = getattr(loader, "_diagnose_index", None)
            instr.seen.iterators.add(iterator)
            if instr.on_epoch is not None and iterator._diagnose_index is not None and instr.in_main_thread() \
                    and instr._is_train(iterator._diagnose_index):
                instr.on_epoch(iterator)
            return iterator

        return iterate

    def _wrap_next(self, original):
        instr = self

        @functools.wraps(original)
        def next_batch(iterator):
            index = getattr(iterator, "_diagnose_index", None)
            if index is None or not instr.in_main_thread():
                return original(iterator)  # a loader iterated by a helper thread or in a worker process
            if not _epoch_exhausted(iterator):  # the next() that ends an epoch starts no step
                instr._on_loader_next(index)
            train = instr._is_train(index)
            start = time.perf_counter()
            instr._in_next = True  # left set when next() raises: the failure was in data loading
            if train and instr.changes.replay_first_batch:  # the ceiling: no data loading after the first batch
                if index not in instr._replayed:
                    instr._replayed[index] = original(iterator)
                batch = instr._replayed[index]
            else:
                batch = original(iterator)
            instr._in_next = False
            if instr.timing:
                instr.seen.wait_s[index] += time.perf_counter() - start
            if train and instr.on_batch is not None:
                instr.on_batch(batch)
            return batch

        return next_batch

    def _on_loader_next(self, index: int) -> None:
        """A step starts at next() on the training loader: the one whose batch was followed by backward() or an
        optimizer step. Until that is known, no loader's next() counts (a validation pass may come first)."""
        seen = self.seen
        seen.batches_drawn[index] += 1
        if seen.train_loader is None and self._trained_since_next and self._last_loader is not None:
            seen.train_loader = self._last_loader
        self._trained_since_next = False
        self._last_loader = index
        if seen.train_loader == index:
            self.steps.signal("dataloader")

    _last_loader: Optional[int] = None
    _trained_since_next = False

    def in_main_thread(self) -> bool:
        return os.getpid() == self._pid and threading.get_ident() == self._main_ident

    def _is_train(self, index: int) -> bool:
        wanted = self.changes.train_loader_location
        if wanted is not None:
            return self.seen.loaders[index].location == wanted
        return index == self.seen.train_loader_or_first()

    def _wrap_optimizer_init(self, original):
        seen, instr = self.seen, self

        changes = self.changes

        @functools.wraps(original)
        def init(opt, params, defaults, *args, **kwargs):
            first = not getattr(opt, "_diagnose_seen", False)
            if first:
                for edit in changes.optimizer_edits:
                    edit(defaults)
            original(opt, params, defaults, *args, **kwargs)
            if not first:
                return
            opt._diagnose_seen = True
            seen.optimizers_alive.append(opt)
            for hook in changes.optimizer_hooks:
                hook(opt)
            lr = defaults.get("lr")
            location, framework = instr.site(sys._getframe(1), opt)
            seen.optimizers.append(OptimizerInfo(
                location=location, framework=framework,
                type=type(opt).__name__,
                lr=float(lr) if isinstance(lr, (int, float)) else None,
                foreach=defaults.get("foreach"),
                fused=defaults.get("fused"),
            ))

        return init

    def _wrap_backward(self, original):
        steps = self.steps

        instr = self

        @functools.wraps(original)
        def backward(tensors, *args, **kwargs):
            if not instr.in_main_thread():
                return original(tensors, *args, **kwargs)
            if isinstance(tensors, torch.Tensor):
                if instr.on_loss is not None and tensors.numel() == 1:
                    instr.on_loss(tensors)  # the script's own loss, before any scaling an optimization adds
                for transform in instr.changes.loss_transforms:
                    tensors = transform(tensors)
            instr._module_depth = 0  # forward is over (a forward that raised and was caught left it above 0)
            instr._in_backward = True  # left set when backward raises (out of memory, say): the phase it failed in
            instr.ddp.before_backward(sys._getframe(1))
            result = original(tensors, *args, **kwargs)
            instr.ddp.after_backward()
            instr._in_backward = False
            instr._trained_since_next = True
            if instr._in_optimizer_step:  # a closure's backward (LBFGS: several per step): the step ends the step
                instr._closure_steps = True
            elif steps.source in (None, "backward", "optimizer") and not instr._closure_steps:
                steps.signal("backward")
            return result

        return backward

    _in_backward = False
    _in_next = False

    def current_phase(self) -> str:
        """The phase the script is in now, or was in when an error left it: a failed forward leaves its modules'
        depth above 0, a failed optimizer step its flag set (their post-hooks do not run)."""
        if self._in_backward:
            return "backward"
        if self._module_depth > 0:
            return "forward"
        if self._in_optimizer_step:
            return "optimizer"
        if self._in_next:
            return "data"
        return "other"

    # optimizer.step(closure) runs forward and backward inside the step, maybe several times (LBFGS): then the
    # optimizer step is the training step, and backward() inside it is no boundary
    _in_optimizer_step = False
    _closure_steps = False

    def _before_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.in_main_thread():
            self._in_optimizer_step = True

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        # Only a fallback: a boundary here sits inside the Optimizer.step annotation in the trace.
        if not self.in_main_thread():
            return
        self._in_optimizer_step = False
        self._trained_since_next = True
        self.ddp.optimizer_stepped()
        self.steps.optimizer_stepped()
        if self.steps.source == "backward" and self._closure_steps:
            self.steps.source = "optimizer"  # backward() runs inside the closures: the optimizer step is the step
        if self.steps.source in (None, "optimizer"):
            self.steps.signal("optimizer")

    def _wrap_counter(self, counter: str):
        seen = self.seen

        def make(original):
            @functools.wraps(original)
            def counted(*args, **kwargs):
                seen.count(counter)
                return original(*args, **kwargs)

            return counted

        return make

    def _wrap_autocast_enter(self, original):
        seen = self.seen

        @functools.wraps(original)
        def enter(region, *args, **kwargs):
            result = original(region, *args, **kwargs)
            # `autocast(enabled=args.bf16)` with the flag off leaves the model in fp32: only enabled regions count
            if getattr(region, "_enabled", False):
                seen.count("autocast")
                seen.autocast_dtypes.add(str(getattr(region, "fast_dtype", "")).replace("torch.", ""))
            else:
                seen.count("autocast_disabled")
            return result

        return enter

    first_forward_at: Optional[float] = None  # time.monotonic() of the first model forward: training began
    first_input_batch: Optional[int] = None  # its first tensor input's leading dimension (a loop with no loader)
    compiled = False  # torch.compile or module.compile ran: no FLOP counter over compiled code

    def _before_forward(self, module, inputs) -> None:
        if self._module_depth == 0 and self.seen.root_module is None and _has_parameters(module):
            self.seen.root_module = getattr(module, "_orig_mod", module)  # torch.compile's wrapper: the model
            self.first_forward_at = time.monotonic()
            self.first_input_batch = _leading_dim(inputs)
            for hook in self.changes.model_hooks:
                hook(module)
        if self._module_depth == 0 and self._global_module_hooks and type(module).__name__ == "OptimizedModule":
            self._track_on(module)
        self._module_depth += 1

    # -- compiled models ------------------------------------------------------------------------------
    # Global module hooks fire twice on a torch.compile'd module, once traced into its graph (torch warns about it
    # on every call). A compiled model called at the top (not a block inside a model) is tracked by hooks of its
    # own instead, which run outside the compiled code; compiled blocks keep the global hooks, warning silenced.
    def _wrap_compile(self, original):
        instr = self

        @functools.wraps(original)
        def compile(model=None, *args, **kwargs):
            instr.dynamo.on_compile_call(kwargs, user_location(sys._getframe(1)))
            for edit in instr.changes.compile_edits:
                edit(kwargs)
            if instr.changes.skip_compile and model is not None:
                return model  # run eagerly: what compiling costs and saves, measured against not compiling
            result = original(model, *args, **kwargs)
            instr.compiled = instr.compiled or isinstance(result, torch.nn.Module)
            return result

        return compile

    def _wrap_module_compile(self, original):
        """module.compile() compiles the module's own call, hooks included: the forward is tracked around it."""
        instr = self

        @functools.wraps(original)
        def compile(module, *args, **kwargs):
            instr.dynamo.on_compile_call(kwargs, user_location(sys._getframe(1)))
            for edit in instr.changes.compile_edits:
                edit(kwargs)
            if instr.changes.skip_compile:
                return None
            result = original(module, *args, **kwargs)
            instr.compiled = True
            compiled = getattr(module, "_compiled_call_impl", None)
            if compiled is not None:
                def tracked_call(*call_args, **call_kwargs):
                    if instr._module_depth == 0:
                        instr._remove_global_module_hooks()
                    instr._before_forward(module, call_args)
                    try:
                        return compiled(*call_args, **call_kwargs)
                    finally:
                        instr._after_forward(module, call_args, None)

                module._compiled_call_impl = tracked_call
            return result

        return compile

    def _track_on(self, module) -> None:
        """From now on forwards are tracked on `module` alone (its hooks run before and after its compiled code)."""
        self._remove_global_module_hooks()
        pre = module.register_forward_pre_hook(self._before_forward)
        post = module.register_forward_hook(self._after_forward)
        self._undo += [pre.remove, post.remove]

    def _remove_global_module_hooks(self) -> None:
        for remove in self._global_module_hooks:
            remove()
        self._global_module_hooks = []

    def _after_forward(self, module, inputs, output) -> None:
        self._module_depth = max(0, self._module_depth - 1)

    # -- results ------------------------------------------------------------------------------------
    def loader_infos(self) -> tuple[LoaderInfo, ...]:
        from dataclasses import replace

        seen = self.seen
        return tuple(replace(info, batches_drawn=n, wait_s=w)
                     for info, n, w in zip(seen.loaders, seen.batches_drawn, seen.wait_s))

    def train_loader_index(self) -> Optional[int]:
        if self.seen.train_loader is not None:
            return self.seen.train_loader
        drawn = self.seen.batches_drawn
        return max(range(len(drawn)), key=drawn.__getitem__) if drawn else None

    def model_info(self) -> Optional[ModelInfo]:
        module = self.seen.root_module
        if module is None:
            return None
        params = list(module.parameters())
        first = params[0]
        return ModelInfo(
            type=type(module).__name__,
            location=class_location(type(module)),
            device=str(first.device),
            dtype=str(first.dtype).replace("torch.", ""),
            parameters=sum(p.numel() for p in params),
            conv_layers=sum(isinstance(m, torch.nn.Conv2d) for m in module.modules()),
            input_batch=self.first_input_batch,
        )


def _leading_dim(inputs) -> Optional[int]:
    """The batch a forward got: its first tensor argument's first dimension (None for a scalar or no tensor)."""
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None) if isinstance(inputs, tuple) else None
    return int(first.shape[0]) if first is not None and first.dim() else None


def _epoch_exhausted(iterator) -> bool:
    """True when this next() will raise StopIteration (map-style loaders know their length)."""
    if getattr(iterator, "_dataset_kind", None) != dl_module._DatasetKind.Map:
        return False
    try:
        return iterator._num_yielded >= len(iterator)
    except (TypeError, AttributeError):
        return False


def _has_parameters(module) -> bool:
    return next(module.parameters(), None) is not None
