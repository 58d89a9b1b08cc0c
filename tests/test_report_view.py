"""The report's view and HTML from hand-made records: the experiments section, the verdict box's colour, the
number formats and the terminal summary. No subprocess: the records are built here."""
from __future__ import annotations

import io
import re

from rich.console import Console

from diagnose.formatting import fmt_ms
from diagnose.model import (
    Analysis,
    BatchProbe,
    BatchSearch,
    Diagnosis,
    Experiment,
    Finding,
    Headline,
    StepBreakdown,
)
from diagnose.report.render import render_html, template_environment
from diagnose.report.terminal import print_summary
from diagnose.report.view import build_view

DIFF = """--- train.py
+++ train.py
@@ -12 +12 @@
-loader = DataLoader(ds, batch_size=32, num_workers=0)
+loader = DataLoader(ds, batch_size=32, num_workers=4)  # <workers> & more"""


def _experiment(optimization: str, verdict: str, speedup=None, ci=None, **extra) -> Experiment:
    return Experiment(optimization=optimization, setting=extra.pop("setting", {}),
                      metric=extra.pop("metric", "steps/s"), speedup=speedup, ci=ci, verdict=verdict,
                      loss_drift=extra.pop("loss_drift", None),
                      peak_memory_bytes=extra.pop("peak_memory_bytes", None), reason=extra.pop("reason", "why"),
                      runs=extra.pop("runs", 2), **extra)


EXPERIMENTS = (
    _experiment("dataloader.num_workers", "faster", 2.4, (2.1, 2.7), setting={"num_workers": 4}, change=DIFF,
                loss_drift=0.0, peak_memory_bytes=3 * 2**30, fidelity="identical", first_step_s=1.25,
                baseline_first_step_s=0.5),
    _experiment("amp", "no-change", 1.01, (0.95, 1.08), setting={"dtype": "bfloat16"}, fidelity="approximate",
                loss_drift=0.031, fidelity_warning="the loss drifted by 3.10% from the baseline"),
    _experiment("compile", "failed", reason="RuntimeError: no compiler"),
    _experiment("combined", "faster", 2.5, (2.2, 2.8), setting={"changes": ["dataloader.num_workers(num_workers=4)"]},
                change=DIFF),
    _experiment("ceiling", "faster", 3.0, (2.7, 3.3)),
)
HEADLINE = Headline(changes=("dataloader.num_workers(num_workers=4)",), speedup=2.5, ci=(2.2, 2.8), verdict="faster",
                    metric="steps/s", data_loading_recovered_frac=0.9, ceiling_speedup=3.0)


def _analysis() -> Analysis:
    buckets = {"data_wait": 0.06, "h2d": 0.0, "compute": 0.03, "communication": 0.0, "host_overhead": 0.01,
               "other": 0.0}
    return Analysis(steps=(StepBreakdown(0, 0.0, 0.1, buckets),), step_time_s={"mean": 0.1, "p50": 0.1, "p95": 0.1},
                    breakdown={k: v / 0.1 for k, v in buckets.items()}, top_ops=(), host_lines=(), metrics={},
                    locations={}, step_definition="test")


def _diagnosis(experiments=EXPERIMENTS, headline=HEADLINE, findings=(), status="completed") -> Diagnosis:
    return Diagnosis(schema=1, script="train.py", steps_profiled=1, step_time_s={"mean": 0.1, "p50": 0.1, "p95": 0.1},
                     breakdown=_analysis().breakdown, findings=findings, experiments=experiments, status=status,
                     headline=headline)


def _html(tmp_path, diagnosis: Diagnosis) -> str:
    return render_html(build_view(tmp_path, None, _analysis(), diagnosis, None))


def _section(html: str) -> str:
    return html[html.index('<section id="experiments">'):html.index("</section>", html.index('id="experiments"'))]


def test_experiments_section_shows_headline_recovery_table_chart_and_diffs(tmp_path):
    html = _html(tmp_path, _diagnosis())
    section = _section(html)
    assert html.index('id="verdict"') < html.index('id="experiments"') < html.index('id="breakdown"')
    assert ("Verified: 1 change, 2.5x faster [2.2-2.8], steps/s: dataloader.num_workers(num_workers=4)"
            in section)
    assert ("The fixes recover 90% of the time data loading cost; with no data loading at all (ceiling) steps "
            "would be 3.0x faster.") in section
    rows = re.findall(r'<tr class="exp-([a-z-]+)"><td class="exp-change"[^>]*><code>([^<]+)</code>', section)
    # the combination and the ceiling first, then by speedup, unmeasured last
    assert rows == [("faster", "combined"), ("faster", "ceiling"), ("faster", "dataloader.num_workers"),
                    ("no-change", "amp"), ("failed", "compile")]
    assert "2.4x [2.1-2.7]" in section and "num_workers=4" in section and "3.0 GiB" in section
    assert "3.10%" in section and '<span class="warn">the loss drifted by 3.10% from the baseline</span>' in section
    assert "RuntimeError: no compiler" in section and "identical" in section and "approximate" in section
    assert "<svg" in section and "speedup over the baseline" in section
    escaped = "+loader = DataLoader(ds, batch_size=32, num_workers=4)  # &lt;workers&gt; &amp; more"
    assert section.count(escaped) == 2 and "<workers>" not in section  # num_workers and combined, escaped
    assert ("reached its first step 1.25 s after starting (start-up, workers, compilation) "
            "vs 0.50 s for the baseline") in section


def test_chart_has_only_the_measured_entries(tmp_path):
    view = build_view(tmp_path, None, _analysis(), _diagnosis(), None)
    svg = view.charts["speedups"]
    assert "amp(dtype=bfloat16)" in svg and "compile" not in svg  # compile failed: no speedup to draw
    # the ceiling (batches replayed from memory) is a measurement, not a change to show
    assert [v.experiment.optimization for v in view.faster_experiments] == ["combined", "dataloader.num_workers"]


def test_no_verified_change_says_so(tmp_path):
    no_change = Headline(changes=(), speedup=None, ci=None, verdict="no-change", metric="steps/s",
                         ceiling_speedup=1.8)
    section = _section(_html(tmp_path, _diagnosis(experiments=EXPERIMENTS[1:3], headline=no_change)))
    assert "No change was verified faster on this machine" in section
    assert "With no data loading at all (ceiling) steps would be 1.80x faster." in section
    assert 'class="change"' not in section


def test_settings_faster_on_their_own_are_named_when_no_combination_was_verified(tmp_path):
    alone = _experiment("dataloader.num_workers", "faster", 3.9, (3.53, 4.42), setting={"num_workers": 4},
                        first_step_s=0.004, baseline_first_step_s=0.002)
    section = _section(_html(tmp_path, _diagnosis(experiments=(alone, EXPERIMENTS[1]), headline=None)))
    assert ("No combination of changes was verified faster; on its own, dataloader.num_workers(num_workers=4) was "
            "3.9x faster [3.5-4.4], steps/s.") in section
    assert "compilation) vs 2.0 ms for the baseline" in section


def test_report_without_experiments_has_no_experiments_section(tmp_path):
    view = build_view(tmp_path, None, _analysis(), _diagnosis(experiments=(), headline=None), None)
    html = render_html(view)
    assert 'id="experiments"' not in html and "speedups" not in view.charts and "Verified" not in html


def _finding(severity: str) -> Finding:
    return Finding(rule="utilization.dispatch-bound", category="utilization", severity=severity, cost_fraction=0.03,
                   title="Batch too small: per-op overhead dominates each step", message="m", location=None,
                   fix="f", fix_code="", optimizations=())


def test_verdict_box_is_green_only_for_a_measured_run_that_ended_normally(tmp_path):
    def style(analysis, **kwargs):
        return build_view(tmp_path, None, analysis, _diagnosis(experiments=(), headline=None, **kwargs),
                          None).verdict_style

    assert style(_analysis()) == "ok"
    assert style(_analysis(), findings=(_finding("low"),), status="timeout") == "ok"
    assert style(_analysis(), status="script_error") == "error"
    assert style(_analysis(), status="interrupted") == "neutral"
    assert style(None, status="no_steps") == "neutral"
    assert style(None, status="completed") == "neutral"  # nothing measured
    assert style(_analysis(), findings=(_finding("high"),), status="script_error") == "high"
    html = render_html(build_view(tmp_path, None, None, _diagnosis(experiments=(), headline=None, status="no_steps"),
                                  None))
    assert 'class="verdict neutral"' in html


def test_sub_millisecond_values_show_microseconds():
    assert fmt_ms(0.000034) == "34 us" and fmt_ms(0.00004) == "40 us"
    assert (fmt_ms(0.0123) == "12.3 ms" and fmt_ms(0.0001) == "0.1 ms" and fmt_ms(0) == "0.0 ms"
            and fmt_ms(None) == "n/a")
    assert template_environment().filters["ms"](0.000034) == "34 us"


def test_terminal_does_not_break_findings_mid_phrase(tmp_path):
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    diagnosis = _diagnosis(findings=(_finding("medium"),))
    print_summary(console, diagnosis, "Bottleneck: low utilization, 3% of step time.", "Profiled 1 step.", tmp_path,
                  None)
    text = out.getvalue()
    assert "Batch too small: per-op overhead dominates each step (low utilization)" in text
    assert "Verified: 1 change, 2.5x faster [2.2-2.8], steps/s" in text


FITS = dict(metric="samples/s", limit_bytes=700 * 10**6)
OUT_OF_MEMORY_EXPERIMENTS = (
    _experiment("grad_accumulation", "fits", setting={"micro_batches": 2, "batch_size": 4096}, throughput=5150.0,
                throughput_ci=(3954.0, 6708.0), peak_memory_bytes=690 * 10**6, change=DIFF, **FITS),
    _experiment("grad_accumulation", "fits", setting={"micro_batches": 4, "batch_size": 2048}, throughput=5423.0,
                throughput_ci=(4152.0, 7084.0), peak_memory_bytes=455 * 10**6, **FITS),
    _experiment("activation_checkpointing", "out-of-memory", reason="ran out of memory in step 0", runs=1, **FITS),
)
FITS_HEADLINE = Headline(changes=("grad_accumulation(micro_batches=4, batch_size=2048)",), speedup=None, ci=None,
                         verdict="fits", metric="samples/s", throughput=5423.0, throughput_ci=(4152.0, 7084.0),
                         tied_with=("grad_accumulation(micro_batches=2, batch_size=4096)",))
SEARCH = BatchSearch(limit_bytes=700 * 10**6, limit_source="--memory-limit", margin=0.05,
                     probes=(BatchProbe(4096, True, 663 * 10**6), BatchProbe(2048, True, 437 * 10**6),
                             BatchProbe(4608, False, 695 * 10**6, out_of_memory=True, detail="can't allocate")),
                     fixed_bytes=211 * 2**20, per_sample_bytes=107_800.0, predicted_batch=4104, largest_fitting=4104,
                     smallest_failing=4608, max_batch=8192, note="4104 fits and 4608 does not", start_batch=8192,
                     recommended=4104)


def test_a_run_out_of_memory_shows_what_fits_its_speed_and_the_batch_search(tmp_path):
    from dataclasses import replace

    diagnosis = replace(_diagnosis(OUT_OF_MEMORY_EXPERIMENTS, FITS_HEADLINE, status="out_of_memory"),
                        batch_search=SEARCH)
    section = _section(_html(tmp_path, diagnosis))
    assert "Fits: grad_accumulation(micro_batches=4, batch_size=2048) trains at 5423 samples/s [4152-7084]" in section
    assert "not measurably faster than grad_accumulation(micro_batches=2, batch_size=4096)" in section
    assert "samples/s [99% interval]" in section and "speedup [99% interval]" not in section
    assert 'class="badge fits"' in section and 'class="badge out-of-memory"' in section
    assert "Largest batch that fits in 667.6 MiB (--memory-limit): 4104" in section
    assert "learning rate" not in section  # a smaller micro-batch, not a larger batch
    rows = re.findall(r'<tr class="(fits|out-of-memory)"><td class="num">(\d+)</td>', section)
    assert rows == [("fits", "2048"), ("fits", "4096"), ("out-of-memory", "4608")]  # by batch size
    out = io.StringIO()
    print_summary(Console(file=out, width=200), diagnosis, "Out of memory.", "ran out of memory", tmp_path, None)
    text = out.getvalue()
    assert "fits          5423 samples/s [4152-7084]" in text and "out-of-memory" in text
    assert "Largest batch that fits" in text
