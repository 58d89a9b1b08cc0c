"""What the run costs, in words and rows: the terminal's lines and the report's table and chart, from diagnosis.json's
`run_cost` as computed (verdict/run_cost.py); nothing is computed here but the wording."""
from __future__ import annotations

from typing import Optional

from diagnose.formatting import fmt_ms
from diagnose.lean_dataclass import dataclass
from diagnose.model import RunCost, RunCostChange, RunCostOption, RunLength
from diagnose.verdict.money import energy_left_out, kwh


@dataclass(frozen=True)
class CostRow:
    """One option as the report's table shows it."""
    label: str
    time: str  # "5.2 h [4.9-5.6]"
    saved: str
    device_hours: str
    energy: str
    money: str
    option: RunCostOption


TIME_ONLY = "time only: no energy read"
UNITS = (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def _unit(seconds: float) -> tuple[str, float]:
    """The largest unit that says the time as 2 of it or more (seconds below two minutes)."""
    return next((name, size) for name, size in UNITS if seconds >= 2 * size or size == 1.0)


def _in_unit(seconds: float, size: float) -> str:
    value = seconds / size
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    name, size = _unit(seconds)
    return f"{_in_unit(seconds, size)} {name}"


def duration_with_interval(seconds: Optional[float], ci: Optional[tuple[float, float]]) -> str:
    """'2.1 min [1.7-2.4 min]': the interval in the value's unit."""
    if seconds is None:
        return "—"
    if not ci:
        return duration(seconds)
    name, size = _unit(seconds)
    return f"{_in_unit(seconds, size)} {name} [{_in_unit(ci[0], size)}-{_in_unit(ci[1], size)} {name}]"


def _interval(ci: Optional[tuple[float, float]], unit) -> str:
    return f" [{unit(ci[0])}-{unit(ci[1])}]" if ci else ""


def _money(value: Optional[float]) -> str:
    """In the user's currency (their prices'): cents from 1 up, three figures below (a short run costs little)."""
    if value is None:
        return "—"
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def energy_text(joules: Optional[float]) -> str:
    if joules is None:
        return "—"
    in_kwh = kwh(joules)
    return f"{in_kwh:.3g} kWh" if in_kwh >= 0.01 else f"{joules:,.0f} J"


def length_sentence(length: RunLength) -> str:
    """'240 steps (2 epochs of 120), read from `for epoch in range(args.epochs)` (train.py:62) > ...'."""
    if length.total_steps is None:
        return f"The run's length is not known: {length.note}."
    epochs = ""
    if length.epochs is not None and length.steps_per_epoch is not None:
        epochs = f" ({length.epochs:g} epoch{'s' if length.epochs != 1 else ''} of {length.steps_per_epoch:,.0f})"
    return f"The run: {length.total_steps:,.0f} steps{epochs}, from {length.source}."


def _time_with_interval(option: RunCostOption) -> str:
    return duration_with_interval(option.train_s, option.train_s_ci)


def rows(cost: RunCost) -> tuple[CostRow, ...]:
    return tuple(CostRow(
        label=o.label,
        time=_time_with_interval(o),
        saved=duration(o.saved_s) + (f" ({_money(o.saved_money)})" if o.saved_money is not None else "")
        if o.saved_s is not None else "",
        device_hours=f"{o.device_hours:,.3g}" if o.device_hours is not None else "—",
        energy=energy_text(o.energy_j) if o.energy_j is not None else ("not measured" if o.energy_note else "—"),
        money=_money(o.money) + _interval(o.money_ci, _money) + _time_only(cost.price_per_kwh, o.energy_j)
        if o.money is not None else "—",
        option=o,
    ) for o in cost.options)


def _time_only(price_per_kwh: Optional[float], *energies_j: Optional[float]) -> str:
    """Said beside a figure that prices the time alone though a price per kWh was given (verdict/money.py)."""
    return f" ({TIME_ONLY})" if energy_left_out(price_per_kwh, *energies_j) else ""


def energy_sentence(cost: RunCost) -> str:
    if cost.energy_per_step_j is None:
        return f"Energy: unavailable ({cost.energy_note})." if cost.energy_note else "Energy: unavailable."
    per_sample = f", {cost.energy_per_sample_j:.3g} J per sample" if cost.energy_per_sample_j is not None else ""
    missing = f"; {cost.energy_note}" if cost.energy_note else ""
    return (f"Energy: {cost.energy_per_step_j:.3g} J per step{per_sample} ({'; '.join(cost.energy_sources)}"
            f"{missing}).")


def basis_sentence(cost: RunCost) -> str:
    startup = f"{duration(cost.startup_s)} from the process's start to the first step, once, + " \
        if cost.startup_s is not None else ""
    steps = f"{cost.length.total_steps:,.0f}" if cost.length.total_steps is not None else "N"
    timed = "timed without the profiler" if cost.step_basis == "unprofiled" else "profiled (none timed without it)"
    devices = f" on {cost.devices} devices" if cost.devices > 1 else ""
    return f"Projected: {startup}{steps} steps x {fmt_ms(cost.step_s)} ({timed}){devices}."


def terminal_lines(cost: Optional[RunCost]) -> list[str]:
    """The run's time now and with each verified change, then its energy: a few lines under the headline."""
    if cost is None:
        return []
    lines = [length_sentence(cost.length)]
    if cost.length.total_steps is None:
        return lines + [f"  step {fmt_ms(cost.step_s)}; {energy_sentence(cost)}"]
    width = max(len(o.label) for o in cost.options)
    for row in rows(cost):
        money = f"  cost {row.money}" if row.option.money is not None else ""
        saved = f"  saves {row.saved}" if row.saved else ""
        lines.append(f"  {row.label:<{width}}  {row.time}{money}{saved}")
    lines.append(f"  {basis_sentence(cost)} {energy_sentence(cost)}")
    return lines


def compare_sentence(change: Optional[RunCostChange]) -> str:
    """compare: the same run on both sides, in time, device-hours, energy and money."""
    if change is None:
        return ""
    length = change.length
    epochs = f", {length.epochs:g} epochs" if length.epochs is not None else ""
    parts = [f"The same run ({length.total_steps:,.0f} steps{epochs}, from {length.source}): "
             f"A {duration(change.a_train_s)}, B {duration_with_interval(change.b_train_s, change.b_train_s_ci)}",
             f"device-hours A {change.a_device_hours:,.3g}, B {change.b_device_hours:,.3g}"]
    if change.a_energy_j is not None or change.b_energy_j is not None:
        parts.append(f"energy A {energy_text(change.a_energy_j)}, B {energy_text(change.b_energy_j)}")
    else:
        parts.append("energy not measured on either side")
    if change.a_money is not None or change.b_money is not None:
        parts.append(f"cost A {_money(change.a_money)}, B {_money(change.b_money)}"
                     + _time_only(change.price_per_kwh, change.a_energy_j, change.b_energy_j))
    return "; ".join(parts) + "."
