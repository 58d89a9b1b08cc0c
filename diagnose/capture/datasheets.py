"""Dense peak throughput of known GPUs from their vendors' datasheets, with the source of each row. Datasheets
quote tensor-core figures "with sparsity" (2:4 structured sparsity, twice the dense rate): the dense figure is the
peak a training step can reach, so that is the one here. The SXM (or OAM) variant of each part; PCIe and NVL
variants run at lower clocks and power, so they match their own, longer names first."""
from __future__ import annotations

import re
from typing import Optional

from diagnose.model import Peak

TERA = 1e12

HALVED = "tensor figures halved from 'with sparsity'"
# name fragment -> (dtype -> TFLOP/s dense, memory TB/s, source)
DATASHEETS: dict[str, tuple[dict[str, float], float, str]] = {
    "H200 NVL": ({"float32": 60, "tf32": 418, "bfloat16": 835, "float16": 835, "float8": 1670}, 4.8,
                 "https://www.nvidia.com/en-us/data-center/h200/ (H200 NVL; " + HALVED + ")"),
    "H200": ({"float32": 67, "tf32": 494, "bfloat16": 989, "float16": 989, "float8": 1979}, 4.8,
             "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM; " + HALVED + ")"),
    "H100 PCIe": ({"float32": 51, "tf32": 378, "bfloat16": 756, "float16": 756, "float8": 1513}, 2.0,
                  "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe; " + HALVED + ")"),
    "H100 NVL": ({"float32": 60, "tf32": 418, "bfloat16": 835, "float16": 835, "float8": 1670}, 3.9,
                 "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL; " + HALVED + ")"),
    "H100": ({"float32": 67, "tf32": 494, "bfloat16": 989, "float16": 989, "float8": 1979}, 3.35,
             "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM; " + HALVED + ")"),
    "A100": ({"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312}, 2.039,
             "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
             "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 80GB SXM; dense figures)"),
    "V100-PCIE": ({"float32": 14, "float16": 112}, 0.9,
                  "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
                  " (V100 PCIe; no bf16 or tf32 units)"),
    "V100": ({"float32": 15.7, "float16": 125}, 0.9,
             "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
             " (V100 SXM2; no bf16 or tf32 units)"),
    "L4": ({"float32": 30.3, "tf32": 60, "bfloat16": 121, "float16": 121, "float8": 242.5}, 0.3,
           "https://www.nvidia.com/en-us/data-center/l4/ (" + HALVED + ")"),
    # an MI250(X) is two dies, each a device of its own to torch: each row is one die's half of the card's figures
    "MI250X": ({"float32": 47.9, "bfloat16": 191.5, "float16": 191.5}, 1.6,
               "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html (matrix FP32; one die)"),
    "MI250": ({"float32": 45.3, "bfloat16": 181.0, "float16": 181.0}, 1.6,
              "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250.html (matrix FP32; one die)"),
}


def datasheet_peaks(device_name: str) -> tuple[Peak, ...]:
    """The dense peaks of a known GPU (its name as torch or the trace gives it); () when it is not in the table."""
    key = _match(device_name)
    if key is None:
        return ()
    flops, bandwidth, source = DATASHEETS[key]
    peaks = [Peak(device_name, dtype, value * TERA, f"datasheet: {source}") for dtype, value in flops.items()]
    return tuple(peaks) + (Peak(device_name, "memory", bandwidth * TERA, f"datasheet: {source}"),)


def _match(device_name: str) -> Optional[str]:
    """The longest name in the table that is a whole word of the device's ("H200 NVL" before "H200"; "L4" is not
    "L40S")."""
    for key in sorted(DATASHEETS, key=len, reverse=True):
        if re.search(rf"(?<![A-Z0-9]){re.escape(key.upper())}(?![A-Z0-9])", device_name.upper()):
            return key
    return None
