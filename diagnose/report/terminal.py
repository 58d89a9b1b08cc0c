"""The short terminal summary printed at the end of a run (rich).

Every line is printed with soft_wrap: when stderr is not a terminal rich assumes 80 columns and would break
lines mid-phrase ("(low" / "utilization)"); a terminal or a log file wraps long lines by itself."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.markup import escape

from diagnose.formatting import fmt_ms, setting_label
from diagnose.model import Diagnosis, Status, Verdict
from diagnose.record.run_record import RunRecord
from diagnose.report.run_cost import terminal_lines as run_cost_lines
from diagnose.report.view import step_time_view
from diagnose.report.wording import (
    CATEGORY_NAMES,
    apply_command,
    batch_search_sentence,
    compile_lines,
    compute_matters,
    headline_sentence,
    memory_sentence,
    prediction_text,
    predictions_sentence,
    result_text,
    speed_sentence,
    startup_sentence,
)

STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}
HANG_FRAMES_SHOWN = 4  # the innermost frames of a hung main thread, in the terminal (all of them in the report)


def print_summary(console: Console, diagnosis: Diagnosis, verdict: str, status: str, run_dir: Path,
                  report: Optional[Path], redirected: int = 0, unrestored: tuple[str, ...] = ()) -> None:
    console.print()
    console.print(status, style="dim", soft_wrap=True, markup=False, highlight=False)  # errors hold [brackets]
    if diagnosis.hang is not None:
        for line in diagnosis.hang.stack[-HANG_FRAMES_SHOWN:]:
            console.print(f"    {line}", style="yellow", soft_wrap=True, markup=False, highlight=False)
        for line in diagnosis.hang.threads:
            console.print(f"    thread {line}", style="dim", soft_wrap=True, markup=False, highlight=False)
        for line in diagnosis.hang.workers:
            console.print(f"    DataLoader {line}", style="yellow", soft_wrap=True, markup=False, highlight=False)
        for line in diagnosis.hang.ranks:
            console.print(f"    {line}", style="yellow", soft_wrap=True, markup=False, highlight=False)
    startup = startup_sentence(diagnosis.startup)
    if startup:
        console.print(startup, style="dim", soft_wrap=True, markup=False, highlight=False)
    for line in compile_lines(diagnosis.compilation):
        console.print(line, style="dim", soft_wrap=True, markup=False, highlight=False)
    _print_headline(console, diagnosis)
    for i, line in enumerate(run_cost_lines(diagnosis.run_cost)):
        console.print(line, style="bold" if i == 0 else None, soft_wrap=True, markup=False, highlight=False)
    console.print(verdict, style="bold", soft_wrap=True, markup=False, highlight=False)
    if diagnosis.breakdown:
        step = step_time_view(diagnosis)
        parts = " · ".join(f"{b.bucket.replace('_', ' ')} {b.frac:.0%} ({fmt_ms(b.seconds)})"
                           for b in step.buckets if b.frac >= 0.005)
        console.print(f"  {step.label}: {parts}", soft_wrap=True)
        if step.overhead:
            console.print(f"  {step.overhead}", soft_wrap=True, style="dim")
    light = speed_sentence(diagnosis.speed_of_light) if compute_matters(diagnosis) else ""
    if light:
        console.print(f"  {light}", soft_wrap=True, highlight=False, markup=False)
    memory = memory_sentence(diagnosis.memory) if _memory_matters(diagnosis) else ""
    if memory:
        console.print(f"  {memory}", soft_wrap=True, highlight=False, markup=False)
    for f in diagnosis.findings:
        console.print(f"  [{STYLE[f.severity]}]{f.severity:<6}[/] {f.cost_fraction:>4.0%}  {escape(f.title)} "
                      f"[dim]({CATEGORY_NAMES[f.category]})[/]", highlight=False, soft_wrap=True)
        if f.location:
            console.print(f"               at {f.location}", highlight=False, soft_wrap=True, markup=False)
        check = next((c for c in diagnosis.predictions if c.rule == f.rule), None)
        prediction = prediction_text(f, check)
        if prediction:
            style = "yellow" if check is not None and check.verdict.endswith("-predicted") else "dim"
            console.print(f"               {prediction}", style=style, highlight=False, soft_wrap=True, markup=False)
    checked = predictions_sentence(diagnosis)
    if checked:
        console.print(f"  {checked}", style="dim", highlight=False, soft_wrap=True, markup=False)
    command = apply_command(run_dir, diagnosis.headline.patch) if diagnosis.headline is not None else ""
    if command:
        console.print(f"Apply:   {command}  (the verified change, written into your files; --dry-run shows the diff)",
                      soft_wrap=True, markup=False, highlight=False)
    if report:
        console.print(f"Report:  {report}", soft_wrap=True, markup=False)
    folder = RunRecord(run_dir).files
    if folder.tb.is_dir():
        console.print(f"Traces:  tensorboard --logdir {folder.tb}", soft_wrap=True, markup=False)
    if redirected:
        console.print(f"Files:   the script wrote {redirected} file(s) in your folders; after the run they were "
                      f"moved to {folder.sandbox} and yours put back as they were", soft_wrap=True, markup=False,
                      style="dim")
    if unrestored:
        console.print(f"Files:   changed during the run by another process, with no copy from before to restore "
                      f"(left as they are): {', '.join(unrestored[:5])}" + (" ..." if len(unrestored) > 5 else ""),
                      soft_wrap=True, markup=False, style="yellow")


MEMORY_SHOWN_FROM = 0.25  # of the limit: below it the terminal leaves memory to the report
def _memory_matters(diagnosis: Diagnosis) -> bool:
    memory = diagnosis.memory
    if memory is None or not memory.peak_bytes:
        return False
    near = memory.limit_bytes and memory.peak_bytes >= MEMORY_SHOWN_FROM * memory.limit_bytes
    return bool(near or memory.estimate or diagnosis.status == Status.OUT_OF_MEMORY)


VERDICT_STYLE = {Verdict.FASTER: "green", Verdict.SLOWER: "red", Verdict.NO_CHANGE: "dim", Verdict.FAILED: "red",
                 Verdict.SKIPPED: "dim", Verdict.FLAGGED: "bold red", Verdict.FITS: "green",
                 Verdict.OUT_OF_MEMORY: "red", Verdict.NOT_VERIFIED: "yellow", Verdict.UNDECIDED: "yellow"}
DATA_WORDS = {"same-sequence": "same data", "same-samples": "same samples, reordered", "unchecked": "data unchecked"}


def _print_headline(console: Console, diagnosis: Diagnosis) -> None:
    head = diagnosis.headline
    sentence = headline_sentence(diagnosis)
    if sentence:
        verified = head is not None and head.verdict == Verdict.FASTER
        console.print(sentence, style="bold green" if verified else "bold yellow", highlight=False, markup=False,
                      soft_wrap=True)
    width = max([9] + [len(e.verdict) for e in diagnosis.experiments])
    out_of_memory = diagnosis.status == Status.OUT_OF_MEMORY
    for e in diagnosis.experiments:
        label = setting_label(e.optimization, e.setting)
        if e.verdict == Verdict.SKIPPED and out_of_memory:  # each memory lever that was not run, and why
            console.print(f"  [dim]{e.verdict:<{width}}[/] {escape(label)}: {escape(e.reason)}", highlight=False,
                          soft_wrap=True)
            continue
        if e.verdict == Verdict.SKIPPED and e.optimization not in ("combined", "ceiling"):
            continue
        result = escape(result_text(e))
        data = f"  ({DATA_WORDS[e.data_check]})" if e.data_check in DATA_WORDS else ""
        if e.timed_over == "whole-epochs":  # the claim holds the epochs' start-ups, as a long run pays them
            data += "  (timed over whole epochs)"
        style = VERDICT_STYLE.get(e.verdict, "default")
        console.print(f"  [{style}]{e.verdict:<{width}}[/] {result:<20} {escape(label)}{data}", highlight=False,
                      soft_wrap=True)
        if e.verdict == Verdict.FLAGGED:
            console.print(f"            {escape(e.fidelity_warning)}", style="red", highlight=False, soft_wrap=True)
        if e.verdict == Verdict.UNDECIDED:  # what the timed windows showed could have widened the interval
            console.print(f"    {e.reason}", style="yellow", highlight=False, markup=False, soft_wrap=True)
        if e.verdict == Verdict.NOT_VERIFIED:  # the numbers to apply by hand, and why they are not verified
            console.print(f"    {e.reason}", style="yellow", highlight=False, markup=False, soft_wrap=True)
            for line in e.change.splitlines():
                console.print(f"      {line}", highlight=False, markup=False, soft_wrap=True)
    search = batch_search_sentence(diagnosis.batch_search)
    if search:
        console.print(f"  {search}", style="dim", highlight=False, markup=False, soft_wrap=True)
