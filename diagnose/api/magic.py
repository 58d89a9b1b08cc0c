"""The notebook's door: `%load_ext diagnose`, then `%%diagnose [options]` on a cell that trains.

The cell runs in the kernel as it would without the magic (to its end: the kernel's state is what the cell leaves),
while a window of its steps is profiled (diagnose.api.window) and analysed; the diagnosis shows inline. Steps are
found as `diagnose run` finds them, from the first of these the cell does: diagnose.step(), a DataLoader's next(),
backward(). (Not an optimizer's step: its hooks run inside the profiler's Optimizer.step span, and a step cut there
nests badly.)

Experiments need a fresh process per variant, so the cell and the cells run before it (the kernel's history, in
the order they ran) are exported to a script in the run folder and given to `diagnose run` there, when that is
faithful: not when the history holds magics or shell commands (`%...`, `!...`) that a script cannot run, which
are named, with the exported script and the command to run once they are replaced."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from diagnose.api.window import Window

EXPORTED_SCRIPT = "notebook_cells.py"
# magics an exported script can do without: they change how the notebook shows things, not what the cells compute
HARMLESS_MAGICS = ("load_ext", "reload_ext", "matplotlib", "config", "time", "timeit")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="%%diagnose", add_help=False,
                                     description="Profile this cell's training steps and diagnose them.")
    parser.add_argument("--warmup", type=int, default=5, help="steps to run before the profiled window")
    parser.add_argument("--steps", type=int, default=10, help="steps to profile")
    parser.add_argument("--experiments", default="findings",
                        help="findings | none | all | ID[,ID...]: run on the cells exported to a script")
    parser.add_argument("--budget-seconds", type=float, default=240.0, help="time for all experiments together")
    parser.add_argument("--out", default=None, help="run folder (default: diagnose_runs/<timestamp>-notebook-...)")
    return parser


class StepBoundaries:
    """While the cell runs: each diagnose.step() and the start of each DataLoader next() and backward(), the first
    kind seen being the step boundary given to the window. Installed for the cell only, then removed."""

    def __init__(self, window: Window):
        self.window, self.kind, self.undo = window, None, []

    def seen(self, kind: str) -> None:
        if self.kind is None:
            self.kind = kind
        if kind == self.kind:
            self.window.step()

    def __enter__(self) -> "StepBoundaries":
        import torch
        from torch.utils.data import dataloader

        from diagnose import step_hook

        self._wrap(dataloader._BaseDataLoaderIter, "__next__", "next")
        self._wrap(torch.Tensor, "backward", "backward")
        previous_hook = step_hook.hook
        step_hook.hook = lambda: self.seen("diagnose.step()")
        self.undo.append(lambda: setattr(step_hook, "hook", previous_hook))
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self.undo):
            undo()

    def _wrap(self, owner, name: str, kind: str) -> None:
        original = owner.__dict__[name]

        def marked(*args, **kwargs):
            self.seen(kind)
            return original(*args, **kwargs)

        setattr(owner, name, marked)
        self.undo.append(lambda: setattr(owner, name, original))


@dataclass(frozen=True)
class ExportedCells:
    script: Path
    dropped: tuple[str, ...]  # lines a script cannot run (magics, shell commands): the export is not faithful


def export_cells(history: list[str], cell: str, folder: Path, cwd: str) -> ExportedCells:
    """The cells run so far (IPython's `In`: Python, magics turned into get_ipython() calls) and this cell's body, as
    one script that imports from the notebook's folder as the kernel does."""
    lines, dropped = [f"import sys\nsys.path.insert(0, {cwd!r})  # the kernel imports from the notebook's folder\n"], []
    for source in [*map(_diagnosed_body, history), cell]:
        for line in source.splitlines():
            stripped = line.strip()
            if "get_ipython()" in stripped:
                if not any(f"_magic('{name}'" in stripped for name in HARMLESS_MAGICS):
                    dropped.append(stripped)
                line = line[: len(line) - len(line.lstrip())] + "pass  # a magic: " + stripped
            lines.append(line + "\n")
        lines.append("\n")
    script = folder / EXPORTED_SCRIPT
    script.write_text("".join(lines), encoding="utf-8")
    return ExportedCells(script, tuple(dropped))


def _diagnosed_body(source: str) -> str:
    """An earlier %%diagnose cell ran its body through run_cell (not kept in `In`): the body, from the magic's call."""
    import ast

    if not source.startswith("get_ipython().run_cell_magic('diagnose'"):
        return source
    call = ast.parse(source).body[0].value
    return ast.literal_eval(call.args[2])


def diagnose_cell(line: str, cell: str, shell) -> None:
    """The cell magic: run the cell with a profiled window, show the diagnosis, then the experiments' result."""
    from IPython.display import HTML, display

    from diagnose.errors import UserError

    try:
        options = _parser().parse_args(shlex.split(line))
    except SystemExit:
        display(HTML(f"<pre>{_parser().format_help()}</pre>"))
        return
    started = time.monotonic()
    try:
        window = Window(options.warmup, options.steps, out=options.out, name="notebook", quiet=True)
    except UserError as exc:  # a bad option: said, and the cell not run (as a command refuses before running)
        print(f"diagnose: {exc.message} ({exc.hint})", file=sys.stderr)
        return
    with StepBoundaries(window) as boundaries:
        outcome = shell.run_cell(cell)
    cell_s = time.monotonic() - started
    window.close()
    if window.analysis is None:
        print(f"diagnose: the cell ran {max(window.count + 1, 0)} step(s) (found at each "
              f"{boundaries.kind or 'diagnose.step(), DataLoader next() or backward()'}): fewer than --warmup "
              f"{options.warmup} + 1, so none was profiled; pass a smaller --warmup", file=sys.stderr)
        return
    try:
        result = window.result(timeout=600)
    except UserError as exc:
        print(f"diagnose: {exc.message} ({exc.hint})", file=sys.stderr)
        return
    display(result)
    print(f"diagnose: the cell ran {cell_s:.1f} s; its diagnosis came {time.monotonic() - started - cell_s:.1f} s "
          f"later (steps at each {boundaries.kind}; profiled {window.first_step}-"
          f"{window.first_step + window.profiled - 1})", file=sys.stderr)
    if options.experiments == "none" or not outcome.success:
        return
    history = list(shell.user_ns.get("In", [])[1:-1])  # In[0] is empty; the last is this cell's magic call
    exported = export_cells(history, cell, window.run_dir, os.getcwd())
    command = (f"diagnose run --experiments {options.experiments} --budget-seconds {options.budget_seconds:g} "
               f"{shlex.quote(str(exported.script))}")
    if exported.dropped:
        print(f"diagnose: no experiments: the notebook's history holds lines a script cannot run "
              f"({'; '.join(exported.dropped[:3])}). Replace them in {exported.script}, then run: {command}",
              file=sys.stderr)
        return
    print(f"diagnose: experiments on the cells exported to a script (a fresh process per variant): {command}",
          file=sys.stderr)
    verified = _run_exported(exported.script, options, window.run_dir / "experiments_run")
    if verified is not None:
        display(verified)


def _run_exported(script: Path, options, out: Path):
    """`diagnose run` of the exported cells in a process of its own, its lines passed on to the cell's output as they
    come (plain text: rich's notebook mode would make each line an output of its own)."""
    import subprocess

    from diagnose.api.results import Result
    from diagnose.record.run_record import RunRecord

    command = [sys.executable, "-m", "diagnose", "run", "--out", str(out), "--experiments", options.experiments,
               "--budget-seconds", str(options.budget_seconds), str(script)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as child:
        for line in child.stdout:
            sys.stderr.write(line)
    if not RunRecord(out).has_diagnosis():  # refused before it ran (its error is printed above)
        return None
    return Result.load(out)


def load_ipython_extension(shell) -> None:
    shell.register_magic_function(lambda line, cell: diagnose_cell(line, cell, shell), magic_kind="cell",
                                  magic_name="diagnose")


def unload_ipython_extension(shell) -> None:
    """Nothing held between cells: each %%diagnose installs its hooks for its own cell only."""
