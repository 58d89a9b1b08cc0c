"""Command line: click options and their checks only; each command's work is in diagnose/commands/."""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn, Optional

import click

from diagnose import __version__
from diagnose.errors import UserError
from diagnose.serial import UnknownFieldsWarning

_entry_point = False  # main() runs: this process is diagnose's own, not a caller's


def _leave(code: int) -> NoReturn:
    """Exit at once, everything written and flushed: tearing down the interpreter (the arrays, every module) would
    take about 25 ms of a 0.45 s analysis. Only as diagnose's own process; a caller of these commands gets
    SystemExit as usual."""
    if _entry_point:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            sys.exit(code)  # (a closed or broken stream: the usual exit reports it)
        os._exit(code)
    sys.exit(code)


def _single_threaded_blas() -> None:
    """numpy's OpenBLAS starts a thread per core on import, which spin a while: on a core the trace's parser needs.
    The analysis multiplies no matrices. Set for this process only (before numpy's import), not its children."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401  (reads it now)
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def _check_script_is_not_an_option(script: str) -> None:
    """SCRIPT swallows unknown options (ignore_unknown_options): `run --step 5 train.py` would otherwise say
    "script not found: --step"."""
    if not script.startswith("-"):
        return
    ctx = click.get_current_context()
    name = script.partition("=")[0]
    known = [opt for param in ctx.command.params for opt in param.opts if opt.startswith("--")]
    import difflib

    raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, known), ctx=ctx)


def _check_templates(templates_dir: Optional[str]) -> None:
    from diagnose.api.calls import _check_templates as check

    check(templates_dir)


def _check_run_folder(run_dir: Path) -> None:
    """`diagnose report` writes into RUN_DIR: refuse any folder `diagnose run` did not write."""
    from diagnose.record.run_record import RunRecord

    hint = "pass a folder written by `diagnose run`"
    record = RunRecord.existing(run_dir)
    if not record.has_own_config():
        raise UserError(f"{run_dir} is not a run folder: it has no config.json written by diagnose", hint +
                        " or `diagnose capture`; for traces of your own use `diagnose analyze`")
    foreign = record.foreign_entries()
    if foreign:  # report rewrites analysis.json, report.html and the traces: never over files not ours
        raise UserError(f"{run_dir} holds files diagnose did not write: {', '.join(foreign[:5])}",
                        "pass the run folder itself, as `diagnose run` or `diagnose capture` made it")


def _options(*decorators):
    """Several click options as one decorator, declared once for every command that takes them."""
    def apply(function):
        for decorator in reversed(decorators):
            function = decorator(function)
        return function
    return apply


RULES = click.option("--rules", "rules_dirs", multiple=True, metavar="DIR",
                     help="Extra folder of rule files (repeatable).")
TEMPLATES = click.option("--templates", "templates_dir", metavar="DIR",
                         help="Folder of templates overriding the bundled ones.")
JOBS = click.option("--jobs", type=click.IntRange(1), metavar="N",
                    help="Analyse several ranks' traces in N worker processes at once (default: one per core).")
MAX_EVENTS = click.option(
    "--max-events", type=click.IntRange(0), metavar="N",
    help="Read at most about N events of a trace: past that, only the middle steps that fit are analysed, in "
         "bounded memory (about 40 bytes an event). Default 10,000,000 (under 1 GB); 0 reads every event.")
OPEN = click.option("--open", "open_report", is_flag=True, help="Open the report in a browser when done.")


def _json(what: str = "diagnosis.json", note: str = ""):
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} to stdout{note}.")


def _out(help_text: str, required: bool = False):
    return click.option("--out", metavar="DIR", required=required, help=help_text)


CAPTURE = _options(
    click.option("--warmup", default=5, show_default=True, type=click.IntRange(0),
                 help="Steps to skip before profiling."),
    click.option("--steps", default=20, show_default=True, type=click.IntRange(1), help="Steps to profile."),
    click.option("--max-seconds", default=60.0, show_default=True, type=click.FloatRange(min=1),
                 help="Stop the script this long after its first step, whatever happened."),
    click.option("--startup-seconds", default=600.0, show_default=True, type=click.FloatRange(min=1),
                 help="Time the script may take to reach its first step (imports, loading, compiling, data "
                      "preparation); --max-seconds starts counting there."),
    click.option("--with-stack", is_flag=True,
                 help="Record Python stacks in the trace (python_function events); slows Python-heavy steps."),
)
SCRIPT = _options(click.argument("script"), click.argument("script_args", nargs=-1, type=click.UNPROCESSED))
SCRIPT_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def _gate(prefix: str):
    return _options(
        click.option("--fail-if-slower", "fail_if_slower", type=click.FloatRange(min=0), metavar="PCT",
                     help=f"{prefix}exit with code 4 when it is slower by more than PCT percent, beyond the noise "
                          "(a CI gate)."),
        click.option("--run-noise", "run_noise", type=click.FloatRange(min=0, min_open=True), metavar="PCT",
                     help=f"{prefix}run-to-run variation of step time you measured on this machine, in percent "
                          "(default: the runs' own repeats, at least 5%)."),
    )


def _script_args(script_args: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(script_args[1:] if script_args[:1] == ("--",) else script_args)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diagnose")
def cli() -> None:
    """Find what holds a PyTorch training script back, and which line to change."""


@cli.command(short_help="Diagnose torch.profiler traces you already have.")
@click.argument("path", type=click.Path(path_type=Path))
@_out("Folder for the report (default: diagnose_runs/<timestamp>-analyze-<name>).")
@_options(RULES, TEMPLATES, _json(), OPEN, JOBS, MAX_EVENTS)
def analyze(path, out, rules_dirs, templates_dir, as_json, open_report, jobs, max_events):
    """Diagnose torch.profiler traces you already have: PATH is a trace (.json, .json.gz), a folder of them
    (one per rank or worker), or a `diagnose run` folder (its tb/ traces). Writes the same report.html and
    diagnosis.json as `diagnose run`, into a new folder. No torch needed.

    Traces recorded with with_stack=True also name the user's function behind host time."""
    import diagnose.trace.prefetch as prefetch

    ahead = None
    if max_events is None:  # (a limit of its own may stream a small trace: nothing to read ahead)
        prefetched = prefetch.start(path)  # decompress while the rest is imported
        _single_threaded_blas()
        from diagnose.trace.load import begin_reading

        ahead = begin_reading(path, prefetched)  # a helper parses while the rest is imported
    _check_templates(templates_dir)
    from diagnose.commands.analyze import analyze_command

    _leave(analyze_command(path, out=out, rules_dirs=tuple(rules_dirs), templates_dir=templates_dir, as_json=as_json,
                           open_report=open_report, jobs=jobs,
                           max_events=prefetch.MAX_EVENTS if max_events is None else max_events, ahead=ahead))


@cli.command(short_help="Compare two runs or traces: what changed, and is it beyond the noise.")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_out("Folder for compare.html and compare.json (default: diagnose_runs/<timestamp>-compare-<A>-vs-<B>).")
@_gate("B against A: ")
@click.option("--force", is_flag=True, help="Compare runs of different scripts.")
@click.option("--live", is_flag=True,
              help="A and B are two versions of a training script: run both here, taking turns, and compare them "
                   "(the interleaved CI gate). Arguments after -- go to both scripts.")
@click.option("--budget-seconds", default=180.0, show_default=True, type=click.FloatRange(min=10),
              help="With --live: the longest the comparison may take; it stops sooner once it decides.")
@_options(RULES, TEMPLATES, _json("compare.json (live.json with --live)"))
def compare(a, b, script_args, out, fail_if_slower, run_noise, force, live, budget_seconds, rules_dirs, templates_dir,
            as_json):
    """Compare B against A: step time with an interval honest about two separate runs, the breakdown and phases
    side by side, the ops and kernels that moved, findings resolved and new, what differs in the setup.

    A and B are run folders (from `diagnose run` or `diagnose capture`) or traces and folders of traces, as
    `diagnose analyze` takes them. With --live they are two training scripts, timed here side by side, window
    by window, until the interval decides or --budget-seconds is spent (live.json).

    Exit codes: 0 done (a gate that could not decide passes, and says so), 1 a live script failed, 2 bad input,
    4 B slower than --fail-if-slower allows (99%)."""
    if live:
        _compare_live(a, b, script_args, out, fail_if_slower, run_noise, force, budget_seconds, as_json)
    if script_args:
        raise UserError(f"unexpected arguments: {' '.join(script_args)}",
                        "script arguments (after --) go with --live, which runs A and B as scripts")
    from diagnose.api.calls import compare as compare_runs

    sys.exit(compare_runs(a, b, out=out, rules=rules_dirs, templates=templates_dir, as_json=as_json, force=force,
                          fail_if_slower=fail_if_slower, run_noise=run_noise).exit_code)


def _compare_live(a, b, script_args, out, fail_if_slower, run_noise, force, budget_seconds, as_json) -> None:
    for option, given in (("--run-noise", run_noise is not None), ("--force", force)):
        if given:
            raise UserError(f"{option} does not apply to --live",
                            "a live comparison measures its own noise, and runs any two scripts")
    _single_threaded_blas()
    from diagnose.commands.live import live_command

    sys.exit(live_command(str(a), str(b), _script_args(script_args), out=out, budget_s=budget_seconds,
                          fail_if_slower=fail_if_slower, as_json=as_json)[2])


@cli.command(context_settings=SCRIPT_SETTINGS,
             short_help="Capture one rank of a job you launch yourself (torchrun, srun).")
@_out("Run folder shared by all ranks.", required=True)
@CAPTURE
@SCRIPT
def capture(out, warmup, steps, max_seconds, startup_seconds, with_stack, script, script_args):
    """Capture one rank of a job you launch yourself, e.g.
    `torchrun --nnodes 2 --nproc-per-node 8 ... -m diagnose capture --out RUN train.py ARGS`;
    then `diagnose report RUN` analyses what all ranks wrote. Run it in every rank, with the same RUN folder."""
    _check_script_is_not_an_option(script)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)  # as `python SCRIPT` has it: the script's folder first, not the current one
    from diagnose.commands.capture import capture_command
    from diagnose.model import RunConfig

    code = capture_command(RunConfig(script=script, script_args=_script_args(script_args), out_dir=out,
                                     warmup_steps=warmup, profile_steps=steps, max_seconds=max_seconds,
                                     with_stack=with_stack, startup_seconds=startup_seconds))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # user threads or DataLoader workers must not keep the rank alive


@cli.command(context_settings=SCRIPT_SETTINGS,
             short_help="Profile a training script, find its bottleneck, verify fixes.")
@_out("Run folder (default: diagnose_runs/<timestamp>-<script>).")
@CAPTURE
@click.option("--experiments", default="findings", show_default=True, metavar="findings|none|all|ID[,ID...]",
              help="Optimizations to apply and measure: those the findings recommend, none, all, or a list of ids.")
@click.option("--budget-seconds", default=240.0, show_default=True, type=click.FloatRange(min=10),
              help="Time for all experiments together; --baseline-ref's interleaved comparison, after them, gets as "
                   "much again (it stops sooner once it decides).")
@_options(RULES, TEMPLATES, _json(note=" (the script's output goes to stderr)"), OPEN)
@click.option("--baseline", metavar="RUN_DIR", type=click.Path(path_type=Path),
              help="An earlier run folder to compare this run with (writes compare.html into the run folder).")
@click.option("--baseline-ref", "baseline_ref", metavar="REV",
              help="A git revision to compare with: the script at REV and as it is now run here, taking turns, "
                   "after this run (the interleaved CI gate, live.json; --budget-seconds bounds it too).")
@_gate("With --baseline or --baseline-ref: ")
@click.option("--memory-limit", "memory_limit", metavar="SIZE",
              help="Run as if the device had SIZE of memory (e.g. 24GB): CUDA's per-process fraction, on the host an "
                   "address-space limit; the experiments run under it too.")
@click.option("--nproc-per-node", metavar="N",
              help="Launch N processes (ranks) through torchrun (torch.distributed.run).")
@click.option("--nnodes", metavar="N[:M]", help="torchrun: number of nodes.")
@click.option("--node-rank", metavar="R", help="torchrun: rank of this node.")
@click.option("--rdzv-backend", metavar="NAME", help="torchrun: rendezvous backend.")
@click.option("--rdzv-endpoint", metavar="HOST[:PORT]", help="torchrun: rendezvous endpoint.")
@click.option("--rdzv-id", metavar="ID", help="torchrun: rendezvous (job) id.")
@click.option("--master-addr", metavar="HOST", help="torchrun: address of the rank 0 node.")
@click.option("--master-port", metavar="PORT", help="torchrun: port on the rank 0 node.")
@click.option("--standalone", is_flag=True, help="torchrun: single-node rendezvous on a free port.")
@click.option("--total-steps", type=click.IntRange(min=1), metavar="N",
              help="Optimizer steps in the run you will launch, where the script's loops do not say it.")
@click.option("--epochs", type=click.FloatRange(min=0, min_open=True), metavar="N",
              help="Epochs of the run you will launch (steps per epoch from the training loader's length).")
@click.option("--price-per-hour", type=click.FloatRange(min=0), metavar="PRICE",
              help="What one device-hour costs you (your cloud price): the run's cost and each change's saving.")
@click.option("--price-per-kwh", type=click.FloatRange(min=0), metavar="PRICE",
              help="What one kWh costs you, for the energy the device counters measured.")
@SCRIPT
def run(out, warmup, steps, max_seconds, startup_seconds, with_stack, experiments, budget_seconds, rules_dirs,
        templates_dir, as_json, open_report, baseline, baseline_ref, fail_if_slower, run_noise, memory_limit,
        total_steps, epochs, price_per_hour, price_per_kwh, script, script_args, **torchrun):
    """Profile SCRIPT (run as `python SCRIPT SCRIPT_ARGS`), find its bottleneck, write a report, then apply
    the recommended optimizations one at a time and report the speedup each verified.

    Put `--` before the script's own arguments if they look like diagnose's options. The torchrun options
    (--nnodes ... --standalone) need --nproc-per-node. Optimization ids for --experiments: see
    `diagnose rules` or docs/guide/experiments.md.

    Exit codes: 0 done, 1 the script raised, 2 bad input, 3 no training step found, 4 slower than the baseline
    by more than --fail-if-slower allows, 5 the script ran out of memory (diagnosed), 6 a step never ended (hung:
    where it waited is said), 130 Ctrl-C, 143 stopped by SIGTERM.
    """
    _check_script_is_not_an_option(script)
    _check_templates(templates_dir)
    from diagnose.api.calls import run_config
    from diagnose.api.options import experiments_selection, memory_size, torchrun_args
    from diagnose.model import CostInputs, RunConfig

    limit_bytes = memory_size(memory_limit)
    config = RunConfig(script=script, script_args=_script_args(script_args), out_dir=out or "", warmup_steps=warmup,
                       profile_steps=steps, max_seconds=max_seconds, startup_seconds=startup_seconds,
                       with_stack=with_stack, experiments=experiments_selection(experiments),
                       budget_seconds=budget_seconds, launcher=torchrun_args(torchrun), memory_limit_bytes=limit_bytes,
                       cost=CostInputs(total_steps, epochs, price_per_hour, price_per_kwh))
    sys.exit(run_config(config, rules=tuple(rules_dirs), templates=templates_dir, baseline=baseline,
                        baseline_ref=baseline_ref, fail_if_slower=fail_if_slower, run_noise=run_noise, as_json=as_json,
                        open_report=open_report).exit_code)


@cli.command(short_help="Analyse a run folder again and re-render its report.")
@click.argument("run_dir", type=click.Path(file_okay=False))
@_options(RULES, TEMPLATES, _json(), JOBS)
def report(run_dir, rules_dirs, templates_dir, as_json, jobs):
    """Analyse RUN_DIR again (new rules, new templates) and re-render its report. RUN_DIR is a folder made by
    `diagnose run` or `diagnose capture` (merging the ranks' captures); for an `analyze` folder or your own
    traces, run `diagnose analyze` again. Exits with the run's own exit code."""
    from diagnose.commands.rules import load_rules

    _check_run_folder(Path(run_dir))
    _check_templates(templates_dir)
    load_rules(rules_dirs)  # a broken rule file fails before anything is written
    from diagnose.commands.report import report_command

    sys.exit(report_command(Path(run_dir), rules_dirs, templates_dir, as_json, jobs))


@cli.command(name="apply", short_help="Write the change a run verified into your files.")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--change", "name", metavar="NAME",
              help="Apply this measured change (its name in RUN/changes/: an optimization id such as "
                   "dataloader.num_workers) instead of the verified one; named, it is applied whatever its verdict.")
@click.option("--dry-run", is_flag=True, help="Print the diff and check the files; write nothing.")
def apply(run_dir, name, dry_run):
    """Write the change that run RUN_DIR verified faster (RUN_DIR/verified.patch) into your files, in the folder
    the run started in. Refuses (exit code 7) when a file it edits changed since the run, and writes nothing then.
    Each edited file keeps a backup (FILE.orig) unless git has it committed unchanged. A change not verified
    faster is applied only when named with --change."""
    from rich.console import Console

    from diagnose.commands.apply import apply_command

    err = Console(stderr=True)
    sys.exit(apply_command(run_dir, name, dry_run, lambda text: err.print(text, highlight=False, markup=False,
                                                                           soft_wrap=True), click.echo))


@cli.command(name="rules", short_help="List the rules and their fixes, or the metrics they use.")
@RULES
@click.option("--metrics", "show_metrics", is_flag=True, help="List the metrics that rule conditions can use.")
@click.option("--check", is_flag=True, help="Run each rule's own test cases and report failures.")
def rules_command(rules_dirs, show_metrics, check):
    """List the rules (what each looks for, and its fix), or the metrics they are written against."""
    from diagnose.commands.rules import rules_listing

    sys.exit(rules_listing(rules_dirs, show_metrics, check))


@cli.command(name="peak", short_help="Measure this machine's peak FLOP/s per dtype and memory bandwidth.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--fresh", is_flag=True, help="Measure again instead of reading the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def peak(device, fresh, as_json):
    """Measure what this machine can do per second: matrix products in each dtype a step may compute in, and a
    large copy for memory bandwidth; with a GPU the datasheet knows, its dense figures beside them. Cached per
    machine, so `diagnose run` pays for it once."""
    from diagnose.commands.peak import peak_command

    sys.exit(peak_command(device, fresh, as_json))


@cli.command(name="sample", short_help="List the bundled sample scripts, or copy one here to run.")
@click.argument("name", required=False)
@click.option("--to", default=".", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to copy the sample into.")
def sample(name, to):
    """List the sample training scripts bundled with diagnose, or copy sample NAME into --to (never over a file),
    e.g. `diagnose sample slow_loader && diagnose run slow_loader.py`."""
    from diagnose.commands.sample import sample_command, samples, summary

    if name is None:
        for known, path in samples().items():
            click.echo(f"{known:<20} {summary(path)}")
        return
    command = sample_command(name, to)
    click.echo(f"copied; run it with: {command}")


def _show_notes(message, category, filename, lineno, file=None, line=None) -> None:
    """diagnose's own warnings as one line to the user, without the source line; others as Python shows them."""
    if issubclass(category, UnknownFieldsWarning):
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[yellow]note:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main(args: Optional[list[str]] = None, *, own_process: bool = True) -> None:
    """The command line. `own_process=False`: called inside another program (a test), which gets SystemExit and
    keeps its own process and warning display."""
    global _entry_point
    _entry_point = own_process
    showwarning = warnings.showwarning
    warnings.showwarning = _show_notes
    try:
        _main(args)
    finally:
        if not own_process:
            warnings.showwarning = showwarning


def _main(args: Optional[list[str]]) -> None:
    try:
        cli.main(args=args, prog_name="diagnose", standalone_mode=False)
    except UserError as exc:
        from rich.console import Console  # (imported where used: `analyze` starts its parsing before rich loads)

        console = Console(stderr=True)
        console.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        if exc.hint:
            console.print(f"  {exc.hint}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        from diagnose.model import Status

        sys.exit(Status.INTERRUPTED.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(UserError.exit_code)  # bad input, as a UserError
