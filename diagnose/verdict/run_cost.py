"""What the run the script is written for costs: its time, energy and money now, and with each verified change.

Time: the run's optimizer steps at the step time measured without the profiler, plus the measured start-up once;
with a change, the same work at the experiment's speedup (its 99% interval carried through: the steps' time over
the interval's ends) and start-up moved by what the experiment measured of the first step against the baseline's.
The speedup is a ratio of throughputs (steps/s, or samples/s where the change alters the batch), so the run's same
samples take the time now over the speedup either way.
Energy: the counters read over the timed window (capture/energy.py), per step; with a change, that times the energy
per unit of work its timed runs read against the baseline's (`Experiment.energy_ratio`), never guessed from its time
where they read none. Money: verdict/money.py's one formula (device-hours at the user's price per hour plus kWh at
their price per kWh; the time alone where no energy was read); without prices, hours and kWh only."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from diagnose.formatting import setting_label
from diagnose.model import (
    Analysis,
    Capture,
    CostInputs,
    EnergyReading,
    Experiment,
    ExperimentResults,
    Measurement,
    RunCost,
    RunCostOption,
    RunLength,
    Verdict,
    stated_step_s,
)
from diagnose.verdict.money import money_for
from diagnose.verdict.stats import geometric_mean

NO_COUNT = "give the run's length with --total-steps N or --epochs N"  # as capture/run_length.py says it
CHANGE_ENERGY_NOTE = "not measured: the experiment's timed runs read no energy counter"


def run_cost(capture: Optional[Capture], analysis: Optional[Analysis], results: ExperimentResults,
             inputs: CostInputs) -> Optional[RunCost]:
    """None when no step time was measured (nothing to project from)."""
    if capture is None or analysis is None:
        return None
    step_s = stated_step_s(analysis.step_time_s)
    if not step_s:
        return None
    length = with_user_length(capture.run_length, inputs.total_steps, inputs.epochs)
    startup_s = _startup_s(capture)
    devices = _devices(capture)
    samples = _samples_per_step(capture)
    energy_step, sources, energy_note = _energy_per_step(capture.energy)
    now = _option(label="now", optimization="", speedup=1.0, ci=None, length=length, step_s=step_s,
                  startup_s=startup_s, energy_step_j=energy_step, devices=devices, inputs=inputs, energy_note="")
    changes = [_with_saving(_change_option(e, length, step_s, startup_s, energy_step, devices, inputs), now, devices,
                            inputs) for e in _verified(results)]
    return RunCost(
        length=length,
        step_s=step_s,
        step_basis="unprofiled" if analysis.step_time_s.get("unprofiled") else "profiled",
        startup_s=startup_s,
        devices=devices,
        samples_per_step=samples,
        energy_per_step_j=energy_step,
        energy_per_sample_j=energy_step / samples if energy_step is not None and samples else None,
        energy_sources=sources,
        energy_note=energy_note,
        price_per_hour=inputs.price_per_hour,
        price_per_kwh=inputs.price_per_kwh,
        options=(now, *changes),
    )


def with_user_length(script: Optional[RunLength], total_steps: Optional[int], epochs: Optional[float]) -> RunLength:
    """What the user said (`--total-steps`, `--epochs`) over what the script says: theirs is the run they launch."""
    script = script or RunLength(None, note=NO_COUNT)
    if total_steps:
        return RunLength(float(total_steps), source="--total-steps", steps_per_epoch=script.steps_per_epoch)
    if epochs and script.steps_per_epoch:
        return RunLength(epochs * script.steps_per_epoch, source="--epochs, with the loader's steps per epoch",
                         steps_per_epoch=script.steps_per_epoch, epochs=epochs)
    if epochs:
        return RunLength(None, note="--epochs needs the training loader's length, and it has none (a stream?): "
                                    "give --total-steps N")
    return script


def _startup_s(capture: Capture) -> Optional[float]:
    """The process's start to the first step, as a plain run pays it once: the interpreter and torch's import before
    the script's first line, then the script's own start-up; diagnose's own imports and set-up left out (else, from
    an older capture, the start-up as diagnose measured it)."""
    if capture.startup is None or not capture.startup.reached_step:
        return None
    if capture.process_start_s is not None and capture.script_to_first_step_s is not None:
        return capture.process_start_s + capture.script_to_first_step_s
    return capture.startup.seconds


def _verified(results: ExperimentResults) -> list[Experiment]:
    """Each change verified faster, the combination last (only when it joins several: one winner is its own); the
    ceiling is no change one can make."""
    found = [e for e in results.experiments if e.verdict == Verdict.FASTER and e.speedup
             and e.optimization not in ("ceiling", "combined")]
    combined = next((e for e in results.experiments if e.optimization == "combined"
                     and e.verdict == Verdict.FASTER and e.speedup), None)
    if combined is not None and len(combined.setting.get("changes", ())) > 1:
        found.append(combined)
    return found


def _with_saving(option: RunCostOption, now: RunCostOption, devices: int, inputs: CostInputs) -> RunCostOption:
    """The time saved over the run, and its price: the difference of the two costs where both count the same parts,
    else the device-hours saved at the price per hour (a change whose energy was not measured saves no priced
    energy)."""
    if now.train_s is None or option.train_s is None:
        return option
    saved_s = now.train_s - option.train_s
    same_parts = now.money is not None and option.money is not None and \
        (inputs.price_per_kwh is None or (now.energy_j is None) == (option.energy_j is None))
    if same_parts:
        saved_money = now.money - option.money
    else:
        saved_money = money_for(saved_s, devices, None, inputs.price_per_hour, None)
    return replace(option, saved_s=saved_s, saved_money=saved_money)


def _change_option(e: Experiment, length: RunLength, step_s: float, startup_s: Optional[float],
                   energy_step_j: Optional[float], devices: int, inputs: CostInputs) -> RunCostOption:
    label = setting_label(e.optimization, e.setting)
    if e.optimization == "combined":
        label = f"combined ({len(e.setting.get('changes', ()))} verified changes)"  # the headline names them
    startup = startup_s
    if startup is not None and e.first_step_s is not None and e.baseline_first_step_s is not None:
        startup = max(0.0, startup + e.first_step_s - e.baseline_first_step_s)
    energy_step = energy_step_j * e.energy_ratio if energy_step_j is not None and e.energy_ratio else None
    # a change of the batch changes the steps, not the samples: per step of now's size, as the ratio is per sample
    return _option(label=label, optimization=e.optimization, speedup=e.speedup, ci=e.ci, length=length,
                   step_s=step_s, startup_s=startup, energy_step_j=energy_step, devices=devices, inputs=inputs,
                   energy_note="" if energy_step is not None else CHANGE_ENERGY_NOTE)


def _option(*, label: str, optimization: str, speedup: float, ci: Optional[tuple[float, float]], length: RunLength,
            step_s: float, startup_s: Optional[float], energy_step_j: Optional[float], devices: int,
            inputs: CostInputs, energy_note: str) -> RunCostOption:
    steps = length.total_steps
    if steps is None:
        return RunCostOption(label=label, optimization=optimization, speedup=speedup, speedup_ci=ci, train_s=None,
                             train_s_ci=None, startup_s=startup_s, energy_note=energy_note)
    once = startup_s or 0.0
    train_s = steps * step_s / speedup + once
    train_ci = (steps * step_s / ci[1] + once, steps * step_s / ci[0] + once) if ci else None
    energy_j = steps * energy_step_j if energy_step_j is not None else None
    hours = train_s / 3600 * devices
    money = _money(train_s, energy_j, devices, inputs)
    money_ci = (_money(train_ci[0], energy_j, devices, inputs), _money(train_ci[1], energy_j, devices, inputs)) \
        if train_ci and money is not None else None
    return RunCostOption(label=label, optimization=optimization, speedup=speedup, speedup_ci=ci, train_s=train_s,
                         train_s_ci=train_ci, startup_s=startup_s, energy_j=energy_j, device_hours=hours, money=money,
                         money_ci=money_ci, energy_note=energy_note)


def _money(train_s: float, energy_j: Optional[float], devices: int, inputs: CostInputs) -> Optional[float]:
    return money_for(train_s, devices, energy_j, inputs.price_per_hour, inputs.price_per_kwh)


def _devices(capture: Capture) -> int:
    """Devices paid for by the hour: each rank's GPU; a CPU-only run is one machine."""
    if capture.environment.cuda_available:
        return max(1, len(capture.ranks))
    return 1


def _samples_per_step(capture: Capture) -> Optional[int]:
    """Samples in one optimizer step of the job: the training loader's batch, times its micro-batches, times the
    ranks."""
    if capture.train_loader is None or capture.train_loader >= len(capture.loaders):
        return None
    batch = capture.loaders[capture.train_loader].batch_size
    if not batch:
        return None
    return batch * max(1, capture.micro_batches_per_step) * max(1, len(capture.ranks))


def _energy_per_step(readings: tuple[EnergyReading, ...]) -> tuple[Optional[float], tuple[str, ...], str]:
    """Joules per step over the domains read, their sources, and what is missing (said, not estimated)."""
    read = [r for r in readings if r.joules is not None and r.steps]
    missing = [f"{r.domain}: {r.note}" for r in readings if r.joules is None]
    notes = "; ".join(missing) if missing else ""
    if not readings:
        notes = "no energy reading (no timed window)"
    if not read:
        return None, (), notes
    sources = tuple(f"{r.domain}: {r.source} ({r.devices} device{'s' if r.devices != 1 else ''})"
                    + (f", {r.note}" if r.note else "") for r in read)
    if missing:
        notes = "not counted: " + notes
    return sum(r.joules / r.steps for r in read), sources, notes


def energy_ratio(baseline_runs: Sequence[Measurement], runs: Sequence[Measurement], metric: str) -> Optional[float]:
    """Energy per unit of work (a sample where the metric counts samples, else a step), the runs' over the
    baseline's: geometric means over each side's runs, every run reading the same domains. None when any run read
    no counter (on this machine, always: no NVML, no RAPL)."""
    per_sample = metric != "steps/s"
    base = [_joules_per_unit(m, per_sample) for m in baseline_runs]
    mine = [_joules_per_unit(m, per_sample) for m in runs]
    values = base + mine
    if not base or not mine or any(v is None for v in values) or len({v[1] for v in values}) != 1:
        return None
    if any(v[0] <= 0 for v in values):  # a counter that did not move: no figure
        return None
    return geometric_mean([v[0] for v in mine]) / geometric_mean([v[0] for v in base])


def _joules_per_unit(m: Measurement, per_sample: bool) -> Optional[tuple[float, tuple[str, ...]]]:
    """(joules per step or sample, the domains read) of one timed run; None when it read none."""
    read = [r for r in m.energy if r.joules is not None and r.steps]
    if not read:
        return None
    units = [(r.samples if per_sample else r.steps) for r in read]
    if any(not u for u in units):
        return None
    return sum(r.joules / u for r, u in zip(read, units)), tuple(sorted(r.domain for r in read))
