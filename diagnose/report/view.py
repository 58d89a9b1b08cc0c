"""Assemble what the report shows from the pipeline's records. Selection and wording, no measurement."""
from __future__ import annotations

import datetime as dt
import linecache
from pathlib import Path
from typing import Optional

import diagnose.report.charts as charts
from diagnose import __version__
from diagnose.formatting import fmt_ms
from diagnose.lean_dataclass import dataclass, field
from diagnose.model import (
    BUCKETS,
    VERIFIED,
    Analysis,
    Capture,
    Diagnosis,
    Experiment,
    Finding,
    Samples,
    Status,
    Verdict,
    stated_step_s,
)
from diagnose.record.run_record import RunRecord
from diagnose.report.run_cost import basis_sentence, energy_sentence, length_sentence
from diagnose.report.run_cost import rows as cost_rows
from diagnose.report.wording import (
    CATEGORY_NAMES,
    apply_command,
    batch_search_sentence,
    budget_sentence,
    compile_lines,
    compute_matters,
    fed_data_sentence,
    headline_sentence,
    memory_sentence,
    prediction_text,
    predictions_sentence,
    recovery_sentence,
    result_text,
    setting_text,
    speed_sentence,
    startup_sentence,
    status_sentence,
    verdict,
)

SNIPPET_CONTEXT = 2
SUMMARY_FIRST = {"combined": 0, "ceiling": 1}  # the table opens with the combination and the ceiling


@dataclass(frozen=True)
class Snippet:
    start_line: int
    lines: tuple[str, ...]
    highlight: int


@dataclass(frozen=True)
class FindingView:
    finding: Finding
    category_name: str
    snippet: Optional[Snippet]
    measured: str = ""  # the best verified setting among the finding's optimizations, when experiments ran
    prediction: str = ""  # the finding's predicted speedup, beside what its experiment measured
    prediction_off: bool = False  # off by more than 2x either way


@dataclass(frozen=True)
class ExperimentView:
    """One experiment with its display strings worked out, so the template only places them."""
    experiment: Experiment
    label: str  # "dataloader.num_workers(num_workers=4)"
    setting: str
    result: str  # "1.52x [1.40-1.65]"; out of memory, "6845 samples/s [6432-7284]"; "" when not measured
    loss_drift: str
    first_step: str  # compile / start-up cost against the baseline, or ""
    apply: str = ""  # the command that writes this change into the user's files, or ""


@dataclass(frozen=True)
class BucketTime:
    bucket: str
    frac: float  # of the profiled mean step
    seconds: float  # that share of the step time shown


@dataclass(frozen=True)
class StepTimeView:
    """The step time the report states: the one timed without the profiler when it was measured (what the script
    runs at), the profiled breakdown's shares applied to it; else the profiled mean, labelled as profiled."""
    seconds: float
    unprofiled: bool
    profiled_s: float
    overhead_factor: Optional[float]  # profiled mean / unprofiled
    buckets: tuple[BucketTime, ...]
    label: str  # "step 16.9 ms" or "profiled step 36.8 ms"
    overhead: str  # "profiler overhead 2.2x (profiled step 36.8 ms)", or "" when not measured


def step_time_view(diagnosis: Diagnosis) -> StepTimeView:
    profiled = diagnosis.step_time_s.get("mean") or 0.0
    plain = diagnosis.step_time_s.get("unprofiled")
    shown = stated_step_s(diagnosis.step_time_s) or 0.0
    factor = profiled / plain if plain and profiled else None
    return StepTimeView(
        seconds=shown, unprofiled=bool(plain), profiled_s=profiled, overhead_factor=factor,
        buckets=tuple(BucketTime(b, f, f * shown) for b, f in diagnosis.breakdown.items()),
        label=f"{'step' if plain else 'profiled step'} {fmt_ms(shown)}",
        overhead=f"profiler overhead {factor:.1f}x (profiled step {fmt_ms(profiled)})" if factor else "",
    )


@dataclass(frozen=True)
class ReportView:
    title: str
    generated: str
    version: str
    run_dir: str
    verdict: str
    status: str
    status_sentence: str
    startup_sentence: str
    diagnosis: Diagnosis
    capture: Optional[Capture]
    analysis: Optional[Analysis]
    findings: tuple[FindingView, ...]
    trace_files: tuple[str, ...]  # paths to open in Perfetto
    tensorboard_dir: str = ""  # the --logdir for TensorBoard, when the traces sit in one
    charts: dict[str, str] = field(default_factory=dict)
    bucket_labels: dict[str, str] = field(default_factory=dict)
    verdict_style: str = "neutral"  # ok | high | medium | error | neutral: the verdict box's colour
    compile_lines: tuple[str, ...] = ()  # torch.compile: its time cold and warm, break-even, changes over the run
    experiments: tuple[ExperimentView, ...] = ()  # sorted for the table and the chart
    faster_experiments: tuple[ExperimentView, ...] = ()  # verified changes: the report shows each one's code
    estimated_changes: tuple[ExperimentView, ...] = ()  # computed, not run (no DataLoader): their code, said so
    headline: str = ""
    headline_verified: bool = False
    apply_command: str = ""  # `diagnose apply RUN`: writes the verified change into the user's files
    verified_patch: str = ""  # RUN/verified.patch, for `git apply`
    show_mfu: bool = False  # the experiments' MFU column: only where compute holds the step back
    show_memory: bool = False  # their peak memory column: only where a run measured one
    result_header: str = "speedup [99% interval]"  # a run out of memory: each variant's own samples/s
    batch_search: str = ""  # the largest batch that fits, when it was searched
    recovery: str = ""
    budget: str = ""  # what the experiment budget covered and bought
    fed_data: str = ""  # how the runs' data were compared, and the fingerprints' cost
    memory: str = ""  # the peak, where in the step, what it is made of
    speed: str = ""  # FLOPs per step against the device's peak
    step_time: Optional[StepTimeView] = None
    predictions: str = ""  # how many findings' predictions their experiments held within 2x
    run_cost: tuple = ()  # the run's time, energy and money now and with each verified change (run_cost.CostRow)
    run_cost_sentences: tuple[str, ...] = ()  # its length and source, the projection's basis, the energy


def snippet(location: Optional[str]) -> Optional[Snippet]:
    if not location:
        return None
    path, _, line = location.rpartition(":")
    if not line.isdigit() or not Path(path).is_file():
        return None
    target = int(line)
    start = max(1, target - SNIPPET_CONTEXT)
    lines = tuple(linecache.getline(path, n).rstrip("\n") for n in range(start, target + SNIPPET_CONTEXT + 1))
    return Snippet(start, lines, target)


def build_view(run_dir: Path, capture: Optional[Capture], analysis: Optional[Analysis], diagnosis: Diagnosis,
               samples: Optional[Samples], trace_files: Optional[tuple[str, ...]] = None,
               tensorboard_dir: str = "") -> ReportView:
    experiments = experiment_views(diagnosis.experiments, run_dir)
    tb = RunRecord(run_dir).files.tb
    patch = diagnosis.headline.patch if diagnosis.headline is not None else ""
    return ReportView(
        title=f"diagnose: {Path(diagnosis.script).name}",
        generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        version=__version__,
        run_dir=str(run_dir),
        verdict=verdict(diagnosis, analysis),
        status=diagnosis.status,
        status_sentence=status_sentence(capture, analysis),
        startup_sentence=startup_sentence(diagnosis.startup),
        compile_lines=tuple(line.strip() for line in compile_lines(diagnosis.compilation)),
        diagnosis=diagnosis,
        capture=capture,
        analysis=analysis,
        findings=tuple(finding_view(f, diagnosis, experiments) for f in diagnosis.findings),
        predictions=predictions_sentence(diagnosis),
        trace_files=trace_files if trace_files is not None else
        tuple(str(p) for p in sorted(tb.glob("*.json*"))),
        tensorboard_dir=tensorboard_dir or (str(tb) if tb.is_dir() else ""),
        charts={**_charts(analysis), **utilization_charts(samples), **_speedup_chart(experiments),
                **memory_charts(diagnosis.memory), **_run_cost_chart(diagnosis.run_cost)},
        bucket_labels=charts.LABELS,
        verdict_style=verdict_style(diagnosis, analysis),
        experiments=experiments,
        faster_experiments=tuple(e for e in experiments if e.experiment.verdict in VERIFIED
                                 and e.experiment.optimization != "ceiling"),  # the ceiling is no change to make
        estimated_changes=tuple(e for e in experiments if e.experiment.verdict == Verdict.NOT_VERIFIED),
        headline=headline_sentence(diagnosis),
        headline_verified=diagnosis.headline is not None and diagnosis.headline.verdict in VERIFIED,
        apply_command=apply_command(run_dir, patch),
        verified_patch=str(run_dir / patch) if patch else "",
        show_mfu=compute_matters(diagnosis) and any(e.mfu_after is not None for e in diagnosis.experiments),
        show_memory=any(e.peak_memory_bytes for e in diagnosis.experiments),
        result_header=("samples/s [99% interval]" if diagnosis.status == Status.OUT_OF_MEMORY
                       else "speedup [99% interval]"),
        batch_search=batch_search_sentence(diagnosis.batch_search),
        recovery=recovery_sentence(diagnosis.headline),
        budget=budget_sentence(diagnosis.budget),
        fed_data=fed_data_sentence(diagnosis.experiments),
        memory=memory_sentence(diagnosis.memory),
        speed=speed_sentence(diagnosis.speed_of_light),
        step_time=step_time_view(diagnosis),
        run_cost=cost_rows(diagnosis.run_cost) if diagnosis.run_cost else (),
        run_cost_sentences=_run_cost_sentences(diagnosis.run_cost),
    )


def _run_cost_sentences(cost) -> tuple[str, ...]:
    if cost is None:
        return ()
    return (length_sentence(cost.length), basis_sentence(cost), energy_sentence(cost))


def _run_cost_chart(cost) -> dict[str, str]:
    """Only with a known length and one change at least: the bars compare a run with the same run changed."""
    if cost is None or len(cost.options) < 2 or cost.options[0].train_s is None:
        return {}
    shown = cost_rows(cost)
    texts = [r.time + (f" · {r.money}" if r.option.money is not None else "") for r in shown]
    seconds = [o.train_s for o in cost.options]
    return {"run_cost": charts.run_cost_chart([r.label for r in shown], seconds,
                                              [o.train_s_ci for o in cost.options], texts)}


def verdict_style(diagnosis: Diagnosis, analysis: Optional[Analysis]) -> str:
    """Green only for a run that measured steps and ended normally; red for the script's own error."""
    if diagnosis.status == Status.OUT_OF_MEMORY:
        return "error"
    if analysis is None or not analysis.steps:
        return "neutral"
    top = diagnosis.findings[0].severity if diagnosis.findings else "low"
    if top in ("high", "medium"):
        return top
    if Status.is_ok(diagnosis.status):
        return "ok"
    return "error" if diagnosis.status == Status.SCRIPT_ERROR else "neutral"


def experiment_views(experiments: tuple[Experiment, ...],
                     run_dir: Optional[Path] = None) -> tuple[ExperimentView, ...]:
    ordered = sorted(experiments, key=lambda e: (SUMMARY_FIRST.get(e.optimization, 2), e.speedup is None,
                                                 -(e.speedup or 0.0)))
    return tuple(_experiment_view(e, run_dir) for e in ordered)


def _experiment_view(e: Experiment, run_dir: Optional[Path] = None) -> ExperimentView:
    setting = setting_text(e.setting)
    first_step = ""
    if e.first_step_s is not None and e.baseline_first_step_s is not None:
        first_step = (f"reached its first step {_seconds(e.first_step_s)} after starting (start-up, workers, "
                      f"compilation) vs {_seconds(e.baseline_first_step_s)} for the baseline")
    return ExperimentView(
        experiment=e, label=f"{e.optimization}({setting})" if setting else e.optimization, setting=setting,
        result=result_text(e), first_step=first_step,
        loss_drift="n/a" if e.loss_drift is None else f"{e.loss_drift:.2%}",
        apply=apply_command(run_dir, e.patch) if run_dir is not None else "",
    )


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else fmt_ms(value)  # a fast first step reads better in ms


def finding_view(finding: Finding, diagnosis: Diagnosis, experiments: tuple[ExperimentView, ...]) -> FindingView:
    check = next((c for c in diagnosis.predictions if c.rule == finding.rule), None)
    return FindingView(finding, CATEGORY_NAMES[finding.category], snippet(finding.location),
                       _measured(finding, experiments), prediction_text(finding, check),
                       check is not None and check.verdict.endswith("-predicted"))


def _measured(finding: Finding, experiments: tuple[ExperimentView, ...]) -> str:
    """'dataloader.num_workers(num_workers=16): 8.46x [7.9-9.1] steps/s': what the experiments verified for this
    finding, which may differ from the rule's general advice (written before anything was measured)."""
    verified = [v for v in experiments if v.experiment.optimization in finding.optimizations
                and v.experiment.verdict == Verdict.FASTER and v.experiment.speedup
                and not v.experiment.fidelity_warning]
    if not verified:
        return ""
    best = max(verified, key=lambda v: v.experiment.speedup)
    caveat = " (changes training dynamics: check convergence)" if best.experiment.fidelity == "changes-dynamics" else ""
    return f"{best.label}: {best.result} faster, {best.experiment.metric}{caveat}"


def _speedup_chart(experiments: tuple[ExperimentView, ...]) -> dict[str, str]:
    measured = [v for v in experiments if v.experiment.speedup is not None]
    if not measured:
        return {}
    labels = [v.experiment.optimization if v.experiment.optimization in SUMMARY_FIRST else v.label for v in measured]
    return {"speedups": charts.speedup_chart(labels, [v.experiment.speedup for v in measured],
                                             [v.experiment.ci for v in measured],
                                             [v.experiment.verdict for v in measured])}


def _charts(analysis: Optional[Analysis]) -> dict[str, str]:
    if analysis is None or not analysis.steps:
        return {}
    result = {
        "breakdown": charts.breakdown_bar(analysis.breakdown),
        "steps": charts.steps_chart([s.duration_s * 1e3 for s in analysis.steps],
                                    {b: [s.buckets_s[b] * 1e3 for s in analysis.steps] for b in BUCKETS}),
    }
    light = analysis.speed_of_light
    if light is not None and light.roofline is not None:
        result["roofline"] = _roofline_chart(light)
    if any(p.launches_per_step for p in analysis.phases):
        result["phases"] = charts.phases_chart([p.phase for p in analysis.phases],
                                               [p.launches_per_step for p in analysis.phases],
                                               [p.gpu_busy_s_per_step * 1e3 for p in analysis.phases])
    return result


def _roofline_chart(light) -> str:
    roof = light.roofline
    # the roofs of the dtypes the ops ran in, and the fastest the device offers: where they could be
    peaks = {p.dtype: p.per_s for p in (*roof.roofs, *((light.best,) if light.best else ()))}
    points = [(op.intensity, op.achieved_flops_s, f"{op.name} {op.shapes} ({op.dtype}): {op.roof_frac:.0%} of its roof",
               op.dtype) for op in roof.ops]
    return charts.roofline_chart(points, peaks, roof.bandwidth.per_s)


def memory_charts(memory) -> dict[str, str]:
    if memory is None or not memory.peak_bytes:
        return {}
    result = {}
    if memory.parts:
        result["memory"] = charts.memory_bar([(p.name, p.bytes) for p in memory.parts], memory.peak_bytes)
    if memory.timeline_bytes:
        result["memory_timeline"] = charts.memory_timeline_chart(memory.timeline_s, memory.timeline_bytes,
                                                                 memory.timeline_phase)
    return result


def utilization_charts(samples: Optional[Samples]) -> dict[str, str]:
    if samples is None or not samples.t_s:
        return {}
    pct = lambda values: [None if v is None else 100 * v for v in values]  # noqa: E731
    result = {"cpu": charts.utilization_chart(
        samples.t_s, {"this training (process + workers)": pct(samples.process_cpu_frac),
                      "whole machine": pct(samples.cpu_frac)},
        samples.window_s, "CPU %")}
    if samples.gpu_util_frac and any(v is not None for v in samples.gpu_util_frac):
        total = samples.gpu_mem_total_bytes or 1
        result["gpu"] = charts.utilization_chart(
            samples.t_s, {"GPU utilization (NVML)": pct(samples.gpu_util_frac),
                          "GPU memory used": [None if v is None else 100 * v / total
                                              for v in samples.gpu_mem_used_bytes]},
            samples.window_s, "%")
    return result

