"""compare: what the same run costs on A's side and on B's, from each run's diagnosis.json `run_cost` (its length,
start-up, energy per step, devices and prices) and the compared step times, the step ratio's interval carried to
B's time. Money by verdict/money.py's formula, both sides counting the same parts."""
from __future__ import annotations

from typing import Optional

from diagnose.compare.sides import LoadedSide
from diagnose.model import RunCost, RunCostChange, StepChange
from diagnose.record.run_record import RunRecord
from diagnose.verdict.money import energy_left_out, money_for


def run_cost_change(a: LoadedSide, b: LoadedSide, step: StepChange) -> Optional[RunCostChange]:
    """None unless a side is a run folder whose length is known."""
    return same_run_on_both_sides(_saved_cost(a), _saved_cost(b), a.side.step_s, b.side.step_s, step.ci)


def same_run_on_both_sides(a_cost: Optional[RunCost], b_cost: Optional[RunCost], a_step_s: float, b_step_s: float,
                           ratio_ci: tuple[float, float]) -> Optional[RunCostChange]:
    """The run of the known length (A's, else B's) at each side's step time, with each side's start-up, devices and
    energy per step, priced by the first side's prices; `ratio_ci`: B's step over A's, carried to B's time."""
    known = [c for c in (a_cost, b_cost) if c is not None and c.length.total_steps is not None]
    if not known:
        return None
    length = known[0].length
    steps = length.total_steps
    a_train = steps * a_step_s + _startup(a_cost)
    b_train = steps * b_step_s + _startup(b_cost)
    b_ci = tuple(steps * a_step_s * r + _startup(b_cost) for r in ratio_ci)
    prices = next((c for c in (a_cost, b_cost) if c is not None
                   and (c.price_per_hour is not None or c.price_per_kwh is not None)), None)
    per_hour = prices.price_per_hour if prices else None
    per_kwh = prices.price_per_kwh if prices else None
    a_energy, b_energy = _energy(a_cost, steps), _energy(b_cost, steps)
    a_devices, b_devices = _devices(a_cost), _devices(b_cost)
    # both sides priced alike: a side without energy read makes both sides' money the time's alone
    a_priced, b_priced = (None, None) if energy_left_out(per_kwh, a_energy, b_energy) else (a_energy, b_energy)
    return RunCostChange(
        length=length, a_train_s=a_train, b_train_s=b_train, b_train_s_ci=b_ci,
        a_device_hours=a_train / 3600 * a_devices, b_device_hours=b_train / 3600 * b_devices,
        a_energy_j=a_energy, b_energy_j=b_energy,
        a_money=money_for(a_train, a_devices, a_priced, per_hour, per_kwh),
        b_money=money_for(b_train, b_devices, b_priced, per_hour, per_kwh),
        price_per_hour=per_hour, price_per_kwh=per_kwh)


def _saved_cost(side: LoadedSide) -> Optional[RunCost]:
    if side.side.kind != "run":
        return None
    try:
        diagnosis = RunRecord(side.side.path).diagnosis()
    except Exception:  # a diagnosis.json from another version: no cost, the comparison stands without it
        return None
    return diagnosis.run_cost if diagnosis is not None else None


def _startup(cost: Optional[RunCost]) -> float:
    return cost.startup_s or 0.0 if cost is not None else 0.0


def _devices(cost: Optional[RunCost]) -> int:
    return cost.devices if cost is not None else 1


def _energy(cost: Optional[RunCost], steps: float) -> Optional[float]:
    if cost is None or cost.energy_per_step_j is None:
        return None
    return cost.energy_per_step_j * steps
