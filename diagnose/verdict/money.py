"""What a run's time and energy cost in money: one formula for the run's own cost (run_cost.py) and compare's two
sides (compare/run_cost.py), and the one kWh.

Device-hours at the user's price per hour plus kWh at their price per kWh. Where both prices are given and no energy
was read, the time alone is priced, and said to be the time alone (`energy_left_out`): renting the device is most
of what a run costs, and the counters that read energy are absent on most machines (CPU VMs, GPUs without NVML's
power counter), so answering "no figure" there would hide a known price behind an unknown one every time. The
wording says "time only" beside such a figure, so it never passes for the whole. A price per kWh alone, with no
energy read, prices nothing: no figure."""
from __future__ import annotations

from typing import Optional

JOULES_PER_KWH = 3.6e6


def kwh(joules: float) -> float:
    return joules / JOULES_PER_KWH


def money_for(train_s: float, devices: int, energy_j: Optional[float], price_per_hour: Optional[float],
          price_per_kwh: Optional[float]) -> Optional[float]:
    """The run's price: `train_s` on `devices` devices at `price_per_hour`, plus `energy_j` at `price_per_kwh`;
    None when neither part can be priced."""
    time_cost = train_s / 3600 * devices * price_per_hour if price_per_hour is not None else None
    energy_cost = kwh(energy_j) * price_per_kwh if price_per_kwh is not None and energy_j is not None else None
    if time_cost is None and energy_cost is None:
        return None
    return (time_cost or 0.0) + (energy_cost or 0.0)


def energy_left_out(price_per_kwh: Optional[float], *energies_j: Optional[float]) -> bool:
    """A price per kWh was given but an energy it needs was not read: the money prices the time only (on every side
    of a comparison, so that both count the same parts)."""
    return price_per_kwh is not None and any(e is None for e in energies_j)
