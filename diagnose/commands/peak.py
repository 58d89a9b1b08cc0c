"""`diagnose peak`: what this machine can do per second, measured (matrix products per dtype, a large copy) and,
for a GPU the datasheet table knows, its vendor's dense figures beside them."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from diagnose.formatting import fmt_flops


def peak_command(device: str, fresh: bool, as_json: bool) -> int:
    import torch

    from diagnose.capture.datasheets import datasheet_peaks
    from diagnose.capture.peak import device_name, machine_peaks
    from diagnose.capture.peak_cache import cache_path
    from diagnose.errors import UserError

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: torch.cuda.is_available() is False here",
                        "run it on a machine with a GPU, or use --device cpu")
    measured = machine_peaks(device, fresh=fresh)
    sheet = {p.dtype: p for p in datasheet_peaks(device_name(device))} if device == "cuda" else {}
    if as_json:
        print(json.dumps({"device": device_name(device), "measured": [p.__dict__ for p in measured],
                          "datasheet": [p.__dict__ for p in sheet.values()]}, indent=1))
        return 0
    console = Console()
    table = Table(title=f"{device_name(device)}: peaks", title_justify="left")
    columns = ("dtype", "measured", "how") + (("datasheet (dense)", "measured / datasheet") if sheet else ())
    for column in columns:
        table.add_column(column, justify="left" if column in ("dtype", "how") else "right")
    for peak in measured:
        listed = sheet.get(peak.dtype)
        row = [peak.dtype, _rate(peak), peak.source.removeprefix("measured: ")]
        if sheet:
            row += [_rate(listed), f"{peak.per_s / listed.per_s:.0%}"] if listed else ["", ""]
        table.add_row(*row)
    console.print(table)
    sources = {p.source.removeprefix("datasheet: ") for p in sheet.values()}
    for source in sources:
        console.print(f"datasheet: {source}", style="dim", highlight=False, soft_wrap=True)
    console.print(f"cached in {cache_path()} (--fresh measures again)", style="dim", highlight=False)
    return 0


def _rate(peak) -> str:
    if peak.dtype == "memory":
        return f"{peak.per_s / 1e9:.3g} GB/s"
    return f"{fmt_flops(peak.per_s)}/s"
