"""compare: what the same run costs on A's side and on B's, from each run's diagnosis.json `run_cost` (its length,
start-up, energy per step, devices and prices) and the compared step times, the step ratio's interval carried to
B's time."""
from __future__ import annotations

from typing import Optional

from diagnose.compare.sides import LoadedSide
from diagnose.model import RunCost, RunCostChange, StepChange
from diagnose.record.run_record import RunRecord

JOULES_PER_KWH = 3.6e6


def run_cost_change(a: LoadedSide, b: LoadedSide, step: StepChange) -> Optional[RunCostChange]:
    """None unless a side is a run folder whose length is known."""
    costs = _saved_cost(a), _saved_cost(b)
    known = [c for c in costs if c is not None and c.length.total_steps is not None]
    if not known:
        return None
    length = known[0].length
    steps = length.total_steps
    a_cost, b_cost = costs
    a_train = steps * a.side.step_s + _startup(a_cost)
    b_train = steps * b.side.step_s + _startup(b_cost)
    b_ci = tuple(steps * a.side.step_s * r + _startup(b_cost) for r in step.ci)
    prices = next((c for c in costs if c is not None and (c.price_per_hour is not None or c.price_per_kwh is not None)),
                  None)
    per_hour = prices.price_per_hour if prices else None
    per_kwh = prices.price_per_kwh if prices else None
    a_energy, b_energy = _energy(a_cost, steps), _energy(b_cost, steps)
    a_devices, b_devices = _devices(a_cost), _devices(b_cost)
    return RunCostChange(
        length=length, a_train_s=a_train, b_train_s=b_train, b_train_s_ci=b_ci,
        a_device_hours=a_train / 3600 * a_devices, b_device_hours=b_train / 3600 * b_devices,
        a_energy_j=a_energy, b_energy_j=b_energy,
        a_money=_money(a_train, a_devices, a_energy, per_hour, per_kwh),
        b_money=_money(b_train, b_devices, b_energy, per_hour, per_kwh),
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


def _money(train_s: float, devices: int, energy_j: Optional[float], per_hour: Optional[float],
           per_kwh: Optional[float]) -> Optional[float]:
    """Both sides priced alike: without the energy a price per kWh needs, no figure rather than a part of one."""
    if per_kwh is not None and energy_j is None:
        return None
    if per_hour is None and per_kwh is None:
        return None
    time_cost = train_s / 3600 * devices * per_hour if per_hour is not None else 0.0
    return time_cost + (energy_j / JOULES_PER_KWH * per_kwh if per_kwh is not None else 0.0)
