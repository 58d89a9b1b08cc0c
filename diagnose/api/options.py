"""The run's options checked once, for the command line and the Python API alike: a bad value is a UserError that
names the option and what to give instead."""
from __future__ import annotations

import re
from typing import Optional, Union

from diagnose.errors import UserError

SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
              "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}
TORCHRUN_SHAPES = ("auto", "cpu", "gpu", "xpu")


def experiments_selection(value: str) -> str:
    from diagnose.optimizations import REGISTRY

    if value in ("none", "all", "findings"):
        return value
    unknown = [v for v in value.split(",") if v not in REGISTRY]
    if unknown:
        raise UserError(f"--experiments: unknown optimization id(s) {', '.join(unknown)}",
                        f"use none, all, or ids among: {', '.join(REGISTRY)}")
    return value


def memory_size(value: Union[str, int, None]) -> Optional[int]:
    """'24GB', '1.5GiB', '800M', '1000000' (or a number of bytes) -> bytes."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", str(value))
    unit = match.group(2).lower() if match else ""
    try:
        size = float(match.group(1)) * SIZE_UNITS[unit] if match else 0
    except (KeyError, ValueError):
        size = 0
    if size < 2**20:
        raise UserError(f"--memory-limit {value}: not a memory size of at least 1 MiB",
                        "give a number with a unit, e.g. --memory-limit 24GB or --memory-limit 1.5GiB")
    return int(size)


def torchrun_args(options: dict) -> tuple[str, ...]:
    """torchrun's own options, passed on as given; none at all means a single process (no torchrun)."""
    if not any(options.values()):
        return ()
    if not options.get("nproc_per_node"):
        raise UserError("torchrun options need --nproc-per-node", "e.g. diagnose run --nproc-per-node 2 train.py")
    count = str(options["nproc_per_node"])
    if not (count.isdigit() and int(count) >= 1) and count not in TORCHRUN_SHAPES:
        raise UserError(f"--nproc-per-node {count}: not a number of processes",
                        "give a whole number of at least 1 (or auto, cpu, gpu, as torchrun takes)")
    args: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value:
            args += [flag, str(value)]
    return tuple(args)


def at_least(option: str, value: float, least: float) -> None:
    """The range the command line's click types check, for a Python caller."""
    if value < least:
        raise UserError(f"{option}={value}: must be at least {least:g}", f"pass {option}={least:g} or more")
