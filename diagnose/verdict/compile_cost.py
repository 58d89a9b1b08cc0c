"""Whether torch.compile pays for itself in the run the script is written for, and what each change to how it
compiles does over that whole run.

Compile time is paid once per process; a steady step's saving is paid back over the run. The eager experiment
(compile_eager: the same script, not compiled) gives the step without compiling, so the saving per step and the
break-even step count: compile time / saving. A change to how the model compiles (compile_dynamic) changes both
its steady step and its compile time (eight recompilations, or one symbolic compile): over N steps the whole run
takes N x step + compile time, and the ratio of the two runs is what a user's run gets."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from diagnose.formatting import setting_label
from diagnose.model import (
    Analysis,
    Capture,
    CompileSummary,
    CompileTrial,
    Experiment,
    ExperimentResults,
    Verdict,
    stated_step_s,
)
from diagnose.verdict.stats import UNDECIDED_WIDTH

CHANGES_TO_COMPILING = ("compile_dynamic", "compile_eager")


def compile_summary(capture: Optional[Capture], analysis: Optional[Analysis],
                    experiments: ExperimentResults) -> Optional[CompileSummary]:
    compilation = capture.compilation if capture is not None else None
    if compilation is None or not compilation.events:
        return None
    events = compilation.events
    hits, misses = sum(e.cache_hits for e in events), sum(e.cache_misses for e in events)
    if compilation.cache == "private":
        cache = "cold"  # the run's own cache, empty when it started: its hits are of graphs it compiled itself
    else:
        cache = "unknown" if hits + misses == 0 else "cold" if hits == 0 else "warm" if misses == 0 else "mixed"
    compile_s = compilation.seconds
    tried = [e for e in experiments.experiments if e.optimization in CHANGES_TO_COMPILING]
    warm_runs = [e.baseline_compile_s for e in tried if e.baseline_compile_s is not None]
    warm_s = compile_s if cache == "warm" else _median(warm_runs) if warm_runs else None
    step_s = stated_step_s(analysis.step_time_s) if analysis is not None else None
    run_steps = capture.run_length.total_steps if capture.run_length is not None else None
    eager, notes = _eager_step(tried, step_s)
    saved = eager - step_s if eager is not None and step_s is not None else None
    paid = warm_s if warm_s is not None else compile_s
    break_even = paid / saved if saved is not None and saved > 0 else None
    if saved is not None and saved <= 0:
        notes.append("compiled steps are no faster than eager ones here: compiling never pays back")
    return CompileSummary(
        torch_version=compilation.torch_version,
        compile_s=compile_s,
        first_step_s=sum(e.seconds for e in events if e.step == 0),
        recompile_s=sum(e.seconds for e in compilation.recompiles),
        recompiles=len(compilation.recompiles),
        graph_breaks=len(compilation.graph_breaks),
        split_s=_split(events),
        cache=cache,
        cold_s=compile_s if cache == "cold" else None,
        warm_s=warm_s,
        eager_step_s=eager,
        compiled_step_s=step_s,
        saved_per_step_s=saved,
        break_even_steps=break_even,
        run_steps=run_steps,
        note="; ".join(notes),
        trials=tuple(_trial(e, step_s, run_steps) for e in tried if e.speedup is not None),
        eager_after_limit=compilation.eager_after_limit,
    )


def _median(values: list[float]) -> float:
    import statistics  # (here: it imports fractions and decimal, 4 ms of every `diagnose analyze`)

    return statistics.median(values)


def _eager_step(tried: list[Experiment], step_s: Optional[float]) -> tuple[Optional[float], list[str]]:
    eager = next((e for e in tried if e.optimization == "compile_eager"), None)
    if eager is None:
        return None, ["the eager experiment did not run (`--experiments compile_eager`): no break-even"]
    if eager.speedup is None or step_s is None:
        return None, [f"the eager experiment gave no speedup ({eager.reason}): no break-even"]
    if eager.verdict == Verdict.UNDECIDED:  # its interval decides nothing: no step time to build on
        return None, [f"the eager experiment was {eager.reason}: no break-even"]
    return step_s / eager.speedup, []


def _split(events) -> dict[str, float]:
    parts = ("dynamo_s", "aot_autograd_s", "inductor_s", "codegen_s", "autotune_s", "backward_s")
    return {part[:-2]: sum(getattr(e, part) or 0.0 for e in events) for part in parts
            if any(getattr(e, part) is not None for e in events)}


def _trial(experiment: Experiment, step_s: Optional[float], run_steps: Optional[float]) -> CompileTrial:
    trial = CompileTrial(label=setting_label(experiment.optimization, experiment.setting),
                         optimization=experiment.optimization, speedup=experiment.speedup, speedup_ci=experiment.ci,
                         compile_s=experiment.compile_s, baseline_compile_s=experiment.baseline_compile_s,
                         run_steps=run_steps)
    if not run_steps or not step_s or experiment.compile_s is None or experiment.baseline_compile_s is None:
        return trial
    # each run once: its start to the first step (imports, data), then its compiling and its steps
    once_baseline = (experiment.baseline_first_step_s or 0.0) + experiment.baseline_compile_s
    once_variant = (experiment.first_step_s or 0.0) + experiment.compile_s
    ratio = _run_ratio(run_steps, step_s, experiment.speedup, once_baseline, once_variant)
    ci = None
    if experiment.ci is not None:
        ci = (_run_ratio(run_steps, step_s, experiment.ci[0], once_baseline, once_variant),
              _run_ratio(run_steps, step_s, experiment.ci[1], once_baseline, once_variant))
    verdict = ("" if ci is None else Verdict.FASTER if ci[0] > 1 else Verdict.SLOWER if ci[1] < 1
               else Verdict.UNDECIDED if ci[1] / ci[0] >= UNDECIDED_WIDTH else Verdict.NO_CHANGE)
    return replace(trial, run_speedup=ratio, run_speedup_ci=ci, run_verdict=str(verdict))


def _run_ratio(steps: float, step_s: float, speedup: float, baseline_once_s: float, variant_once_s: float) -> float:
    """The baseline's whole run over the variant's: each is its steps at its steady step plus what it pays once
    (the start to the first step, the compiling)."""
    return (steps * step_s + baseline_once_s) / (steps * step_s / speedup + variant_once_s)
