"""diagnose.run / analyze / compare: the commands as Python calls. Each does what its command does (the same
progress on stderr, the same folder written) and returns the result instead of exiting; bad input raises
diagnose.errors.UserError, whose message and hint say what to change."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from diagnose.api.options import at_least, experiments_selection, memory_size, torchrun_args
from diagnose.api.results import ComparisonResult, Result

PathLike = Union[str, Path]


def run(script: PathLike, *script_args: str, out: Optional[PathLike] = None, warmup: int = 5, steps: int = 20,
        max_seconds: float = 60.0, startup_seconds: float = 600.0, with_stack: bool = False,
        experiments: str = "findings", budget_seconds: float = 240.0, rules: tuple[str, ...] = (),
        templates: Optional[str] = None, baseline: Optional[PathLike] = None,
        fail_if_slower: Optional[float] = None, run_noise: Optional[float] = None,
        memory_limit: Union[str, int, None] = None, total_steps: Optional[int] = None, epochs: Optional[float] = None,
        price_per_hour: Optional[float] = None, price_per_kwh: Optional[float] = None,
        **torchrun: Union[str, bool, None]) -> Result:
    """`diagnose run SCRIPT SCRIPT_ARGS` with its options as keywords (--max-seconds is max_seconds=...; the
    torchrun options too: nproc_per_node=2, standalone=True)."""
    from diagnose.model import CostInputs, RunConfig

    for option, value, least in (("warmup", warmup, 0), ("steps", steps, 1), ("max_seconds", max_seconds, 1),
                                 ("startup_seconds", startup_seconds, 1), ("budget_seconds", budget_seconds, 10)):
        at_least(option, value, least)
    config = RunConfig(script=str(script), script_args=tuple(str(a) for a in script_args),
                       out_dir=str(out) if out else "", warmup_steps=warmup, profile_steps=steps,
                       max_seconds=max_seconds, startup_seconds=startup_seconds, with_stack=with_stack,
                       experiments=experiments_selection(experiments), budget_seconds=budget_seconds,
                       launcher=torchrun_args(torchrun), memory_limit_bytes=memory_size(memory_limit),
                       cost=CostInputs(total_steps, epochs, price_per_hour, price_per_kwh))
    return run_config(config, rules=tuple(rules), templates=templates, baseline=baseline,
                      fail_if_slower=fail_if_slower, run_noise=run_noise)


def run_config(config, *, rules: tuple[str, ...] = (), templates: Optional[str] = None,
               baseline: Optional[PathLike] = None, fail_if_slower: Optional[float] = None,
               run_noise: Optional[float] = None, as_json: bool = False, open_report: bool = False,
               baseline_ref: Optional[str] = None) -> Result:
    """A run from its RunConfig (the command line builds one); as_json and open_report as its flags."""
    from diagnose.commands.options import BaselineGate, OutputOptions
    from diagnose.commands.run import run_and_report
    from diagnose.errors import UserError

    if baseline is not None and baseline_ref is not None:
        raise UserError("--baseline and --baseline-ref both given", "compare with an earlier run folder "
                        "(--baseline) or with the script at a git revision (--baseline-ref), one of them")
    if fail_if_slower is not None and baseline is None and baseline_ref is None:
        raise UserError("--fail-if-slower needs --baseline or --baseline-ref",
                        "pass the revision to compare with (--baseline-ref HEAD~1, interleaved: the gate CI needs) "
                        "or an earlier run folder (--baseline RUN_DIR)")
    if run_noise is not None and baseline is None:
        raise UserError("--run-noise needs --baseline", "pass the earlier run folder to compare with: "
                        "--baseline RUN_DIR (--baseline-ref measures its own noise)")
    _check_templates(templates)
    gate = BaselineGate(Path(baseline) if baseline else None, fail_if_slower, run_noise, baseline_ref)
    result, code = run_and_report(config, OutputOptions(tuple(rules), templates, as_json, open_report), gate)
    return Result.from_pipeline(result, code)


def analyze(path: PathLike, *, out: Optional[PathLike] = None, rules: tuple[str, ...] = (),
            templates: Optional[str] = None, jobs: Optional[int] = None, max_events: Optional[int] = None,
            as_json: bool = False, open_report: bool = False) -> Result:
    """`diagnose analyze PATH`: traces (a file, a folder of them, a run folder) you already have."""
    from diagnose.commands.analyze import analyze_and_report
    from diagnose.trace import MAX_EVENTS

    _check_templates(templates)
    result, code = analyze_and_report(Path(path), out=str(out) if out else None, rules_dirs=tuple(rules),
                                      templates_dir=templates, as_json=as_json, open_report=open_report, jobs=jobs,
                                      max_events=MAX_EVENTS if max_events is None else max_events)
    return Result.from_pipeline(result, code)


def compare(a: PathLike, b: PathLike, *, out: Optional[PathLike] = None, force: bool = False,
            fail_if_slower: Optional[float] = None, run_noise: Optional[float] = None,
            rules: tuple[str, ...] = (), templates: Optional[str] = None, as_json: bool = False) -> ComparisonResult:
    """`diagnose compare A B`: B against A."""
    from diagnose.commands.compare import compare_and_report

    _check_templates(templates)
    comparison, out_dir, code = compare_and_report(Path(a), Path(b), out=str(out) if out else None,
                                                   rules_dirs=tuple(rules), templates_dir=templates,
                                                   as_json=as_json, force=force, fail_if_slower=fail_if_slower,
                                                   run_noise=run_noise)
    return ComparisonResult(str(out_dir), comparison, code)


def _check_templates(templates_dir: Optional[str]) -> None:
    """A missing folder or a template that does not parse is an error now, not after a long run."""
    if templates_dir is None:
        return
    from diagnose.errors import UserError
    from diagnose.report.render import check_templates

    if not Path(templates_dir).is_dir():
        raise UserError(f"templates folder not found: {templates_dir}",
                        "pass a folder holding report.html.j2 and/or report.css to --templates")
    check_templates(templates_dir)


def load(run_dir: PathLike) -> Result:
    """The result a folder written by diagnose holds (diagnosis.json), e.g. a callback's window, read back."""
    return Result.load(run_dir)
