"""The diagnosis: the analysis, the rules' findings and the experiments' results assembled into the one record
(diagnosis.json) that every renderer reads, with the verdicts only they together give (predictions checked, the run's
cost, compiling's break-even)."""
from __future__ import annotations

from typing import Optional

from diagnose.model import Analysis, Capture, CostInputs, Diagnosis, ExperimentResults, Finding, Status
from diagnose.verdict.compile_cost import compile_summary
from diagnose.verdict.predictions import check_predictions, count_off
from diagnose.verdict.run_cost import run_cost

NO_STEPS = {"mean": 0.0, "p50": 0.0, "p95": 0.0, "unprofiled": None}


def build_diagnosis(script: str, capture: Optional[Capture], analysis: Optional[Analysis], findings: list[Finding],
                    experiments: ExperimentResults, cost_inputs: CostInputs = CostInputs()) -> Diagnosis:
    metrics = analysis.metrics if analysis else {}
    predictions = check_predictions(tuple(findings), experiments.experiments, metrics)
    return Diagnosis(
        schema=1,
        script=script,
        steps_profiled=len(analysis.steps) if analysis else 0,
        step_time_s=analysis.step_time_s if analysis else NO_STEPS,
        breakdown=analysis.breakdown if analysis else {},
        findings=tuple(findings),
        experiments=experiments.experiments,
        status=capture.status if capture else (Status.ANALYZED if analysis is not None else Status.NO_CAPTURE),
        metrics=metrics,
        headline=experiments.headline,
        ranks=analysis.ranks if analysis else (),
        experiments_interrupted=experiments.interrupted,
        phases=analysis.phases if analysis else (),
        budget=experiments.budget,
        out_of_memory=capture.out_of_memory if capture else None,
        memory=_memory(capture, analysis),
        batch_search=experiments.batch_search,
        speed_of_light=analysis.speed_of_light if analysis else None,
        startup_s=capture.startup.seconds if capture and capture.startup else None,
        startup=capture.startup if capture else None,
        predictions=predictions,
        predictions_off=count_off(predictions),
        hang=capture.hang if capture else None,
        worker_failure=capture.worker_failure if capture else None,
        run_cost=run_cost(capture, analysis, experiments, cost_inputs),
        compilation=compile_summary(capture, analysis, experiments),
    )


def _memory(capture: Optional[Capture], analysis: Optional[Analysis]):
    """The analysis's breakdown; for a run that ran out of memory before any profiled step, the estimate from
    what the capture measured."""
    from diagnose.analysis.memory import estimated_breakdown

    if capture is not None and capture.status == Status.OUT_OF_MEMORY and (analysis is None or analysis.memory is None):
        return estimated_breakdown(capture)
    return analysis.memory if analysis is not None else None
