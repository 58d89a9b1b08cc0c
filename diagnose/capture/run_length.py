"""The length of the run the script is written for, read from the script while it runs.

At a step boundary the stack shows where training is: the user's frames and, in each, the loops around the line
that is running. Their counts are read from the source (the loop's `range(...)`, evaluated against the frame's
variables by a small evaluator that runs no code but len()) or from the loader they iterate (`len(loader)`). Under
Hugging Face's Trainer or Lightning their own figures are read instead: the Trainer's state (which counts
`num_train_epochs` / `max_steps` as TrainingArguments set them), Lightning's `max_epochs` / `max_steps`.
A `while` loop, a generator or anything else without a count leaves the length unknown, said with the place and
the options that give it (`--total-steps`, `--epochs`)."""
from __future__ import annotations

import ast
import inspect
import math
import operator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import FrameType
from typing import Any, Optional

from diagnose.capture import frameworks
from diagnose.capture.sites import is_user_file
from diagnose.model import RunLength

NO_COUNT = "give the run's length with --total-steps N or --epochs N"
PER_MICRO_BATCH = ("dataloader", "backward")  # step sources that signal once per micro-batch


@dataclass(frozen=True)
class Loop:
    """One loop around the running line: its count of iterations (None: unknown) and how it reads."""
    location: str  # file:line of the loop
    code: str  # its header, as written
    count: Optional[float]
    over_loader: bool  # iterates something that is not a range: the training loader, one epoch per pass


@dataclass(frozen=True)
class Observed:
    """What one step boundary showed: a framework's own total, or the user's loops (innermost first)."""
    framework_length: Optional[RunLength] = None
    loops: tuple[Loop, ...] = ()
    note: str = ""


def observe(frame: Optional[FrameType]) -> Observed:
    """Read at a step boundary, from the frame that called into diagnose. Never raises: what cannot be read is
    said in the note."""
    try:
        found = frameworks.running(frame)
        if found is not None:
            return Observed(framework_length=_framework_length(found[0].name, found[1]))
        return Observed(loops=tuple(_loops_around(frame)))
    except Exception as exc:  # the script's objects are the script's: reading them must not end the run
        return Observed(note=f"the script's loops could not be read ({type(exc).__name__}: {exc})")


def run_length(observed: Optional[Observed], loader_len: Optional[int], micro_per_step: int,
               step_source: Optional[str]) -> RunLength:
    """The run's optimizer steps from what was observed: each loop's count times the loops around it."""
    if observed is None:
        return RunLength(None, note=f"no step boundary was read; {NO_COUNT}")
    if observed.framework_length is not None:
        return observed.framework_length
    if not observed.loops:
        return RunLength(None, note=f"{observed.note or 'no loop around the training step was found'}; {NO_COUNT}")
    micro = max(1, micro_per_step)
    per_iteration = 1.0 / micro if step_source in PER_MICRO_BATCH else 1.0
    inner, *outer = observed.loops
    if inner.count is None:
        return RunLength(None, note=f"the loop at {inner.location} ({inner.code}) has no count to read; {NO_COUNT}")
    if inner.count == micro and micro > 1 and outer:  # the loop over one step's micro-batches
        inner, *outer = outer
        per_iteration = 1.0
        if inner.count is None:
            return RunLength(None, note=f"the loop at {inner.location} ({inner.code}) has no count to read; {NO_COUNT}")
    if inner.over_loader and loader_len is not None:
        inner = Loop(inner.location, inner.code, float(loader_len), True)
    steps_per_epoch = inner.count * per_iteration if inner.over_loader else None
    total, epochs, read = inner.count * per_iteration, 1.0, [_said(inner)]
    for loop in outer:
        if loop.count is None:
            return RunLength(None, steps_per_epoch=steps_per_epoch,
                             note=f"the loop at {loop.location} ({loop.code}) has no count to read; {NO_COUNT}")
        total, epochs = total * loop.count, epochs * loop.count
        read.append(_said(loop))
    source = " > ".join(reversed(read))  # outermost first, as the script reads
    return RunLength(total, source=source, steps_per_epoch=steps_per_epoch,
                     epochs=epochs if steps_per_epoch is not None else None)


def _said(loop: Loop) -> str:
    return f"`{loop.code}` ({loop.location})"


# -- frameworks --------------------------------------------------------------------------------------------------
def _framework_length(name: str, trainer: Any) -> RunLength:
    if name == "huggingface":
        return _hf_length(trainer)
    if name == "lightning":
        return _lightning_length(trainer)
    return RunLength(None, note=f"{name}'s run length is not read; {NO_COUNT}")


def _hf_length(trainer: Any) -> RunLength:
    """The Trainer computed its optimizer steps from TrainingArguments (max_steps when set, else num_train_epochs
    over the loader's steps per epoch) into its state before the first step."""
    args, state = trainer.args, trainer.state
    total = getattr(state, "max_steps", 0) or 0
    epochs = getattr(state, "num_train_epochs", 0) or 0
    said = f"max_steps={args.max_steps}" if getattr(args, "max_steps", -1) > 0 else \
        f"num_train_epochs={args.num_train_epochs:g}"
    if total <= 0:
        return RunLength(None, note=f"the Trainer has not counted its steps yet; {NO_COUNT}")
    per_epoch = total / epochs if epochs else None
    return RunLength(float(total), source=f"TrainingArguments ({said}), as the Trainer counts it",
                     steps_per_epoch=per_epoch, epochs=float(epochs) if epochs else None)


def _lightning_length(trainer: Any) -> RunLength:
    """max_steps when set (not -1), else max_epochs (Lightning's default 1000 when neither is) over the batches
    per epoch, accumulation counted."""
    max_steps, max_epochs = getattr(trainer, "max_steps", -1), getattr(trainer, "max_epochs", None)
    batches = getattr(trainer, "num_training_batches", None)
    accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
    per_epoch = math.ceil(batches / accumulate) if isinstance(batches, (int, float)) and math.isfinite(batches) \
        else None
    if max_steps is not None and max_steps > 0:
        return RunLength(float(max_steps), source=f"Trainer(max_steps={max_steps})", steps_per_epoch=per_epoch)
    if max_epochs is None or max_epochs < 0:
        return RunLength(None, steps_per_epoch=per_epoch, note=f"Trainer(max_epochs={max_epochs}) has no end; "
                                                               f"{NO_COUNT}")
    if per_epoch is None:
        return RunLength(None, note=f"Lightning's training batches per epoch are not known; {NO_COUNT}")
    return RunLength(float(max_epochs * per_epoch), source=f"Trainer(max_epochs={max_epochs})",
                     steps_per_epoch=float(per_epoch), epochs=float(max_epochs))


# -- the user's loops ---------------------------------------------------------------------------------------------
def _loops_around(frame: Optional[FrameType]):
    """The loops around each user frame's running line, innermost first, through the frames that called it."""
    while frame is not None:
        path = frame.f_code.co_filename
        if is_user_file(path):
            for node in _enclosing_loops(path, frame.f_lineno):
                yield _loop(node, frame, path)
        frame = frame.f_back


def _enclosing_loops(path: str, line: int) -> list[ast.AST]:
    loops = [node for node in _loop_nodes(path) if node.lineno <= line <= (node.end_lineno or node.lineno)]
    return sorted(loops, key=lambda node: node.lineno, reverse=True)  # a nested loop starts after its parent


@lru_cache(maxsize=32)
def _loop_nodes(path: str) -> tuple[ast.AST, ...]:
    try:
        tree = ast.parse(Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple(n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While)))


def _loop(node: ast.AST, frame: FrameType, path: str) -> Loop:
    location = f"{path}:{node.lineno}"
    if isinstance(node, ast.While):
        return Loop(location, f"while {ast.unparse(node.test)}", None, False)
    code = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}"
    call = node.iter
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range":
        try:
            args = [int(_evaluate(a, frame)) for a in call.args]
            return Loop(location, code, float(len(range(*args))), False)
        except (_Unreadable, TypeError, ValueError, OverflowError):
            return Loop(location, code, None, False)
    return Loop(location, code, _sized(node.iter, frame), True)


def _sized(expression: ast.AST, frame: FrameType) -> Optional[float]:
    """An iterable's length when it is a plain container or a loader (enumerate(x) and tqdm(x) count as x)."""
    while isinstance(expression, ast.Call) and expression.args:
        expression = expression.args[0]
    try:
        value = _evaluate(expression, frame)
        return float(len(value))
    except (_Unreadable, TypeError, ValueError):
        return None


class _Unreadable(Exception):
    """An expression the evaluator will not run (a call, a property, a name it cannot see)."""


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
              ast.Div: operator.truediv, ast.Mod: operator.mod}
_CALLS = {"len": len, "int": int, "min": min, "max": max, "round": round}


def _evaluate(node: ast.AST, frame: FrameType) -> Any:
    """Names, attributes held in an object's own fields, constants, indexing of built-in containers, arithmetic
    and len/int/min/max/round: what `range(args.epochs)`, `range(cfg["epochs"])` or `range(len(loader) * 3)` need,
    and nothing that runs the script's code but a container's len()."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):  # str: a key
        return node.value
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals):
            if node.id in scope:
                return scope[node.id]
        raise _Unreadable(node.id)
    if isinstance(node, ast.Attribute):
        return _own_attribute(_evaluate(node.value, frame), node.attr)
    if isinstance(node, ast.Subscript):
        container, key = _evaluate(node.value, frame), _evaluate(node.slice, frame)
        if isinstance(container, (dict, list, tuple)):
            return container[key]
        raise _Unreadable("subscript")
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left, frame), _evaluate(node.right, frame))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, frame)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS \
            and not node.keywords and not _shadowed(node.func.id, frame):
        return _CALLS[node.func.id](*(_evaluate(a, frame) for a in node.args))
    raise _Unreadable(type(node).__name__)


def _shadowed(name: str, frame: FrameType) -> bool:
    return name in frame.f_locals or name in frame.f_globals


def _own_attribute(obj: Any, name: str) -> Any:
    """An attribute stored on the object (argparse's Namespace, a dataclass, a module's global), not one a
    property would compute."""
    value = inspect.getattr_static(obj, name)
    if hasattr(type(value), "__get__") and not isinstance(value, (int, float, str)):
        raise _Unreadable(name)  # a property or method: running it would run the script's code
    return value
