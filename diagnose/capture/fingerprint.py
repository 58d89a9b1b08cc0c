"""What the model was fed: one 64-bit fingerprint per sample of a batch, so two runs can be compared by the samples
they trained on, not only by their loss.

A sample is one row (the first dimension) of every tensor in the batch. Its fingerprint is a linear hash of its
first elements and of a strided sample of the rest, each element's bits taken as an integer: two different items
differ there with overwhelming likelihood, and hashing 128 elements a row keeps the cost to microseconds a batch.
It is computed where the batch is (the host, for what a DataLoader yields): no copy, no device sync."""
from __future__ import annotations

import zlib
from typing import Any, Optional

import torch

HEAD_ELEMENTS = 32  # every element at the start of a row (token ids, labels, a header)
STRIDED_ELEMENTS = 96  # and this many spread over the rest
SAMPLED = HEAD_ELEMENTS + STRIDED_ELEMENTS
# the integer type of each element's bits: a float hashes by its bits, not its value (-0.0 and 0.0 differ)
BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
        torch.bfloat16: torch.int16, torch.bool: torch.uint8,
        **{dtype: torch.uint8 for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
           if (dtype := getattr(torch, name, None)) is not None}}
_WEIGHTS: dict[str, torch.Tensor] = {}


def _weights(device: torch.device) -> torch.Tensor:
    """Fixed odd 62-bit multipliers (the same in every process: runs are compared with each other)."""
    key = str(device)
    if key not in _WEIGHTS:
        generator = torch.Generator().manual_seed(0x5EED)
        weights = torch.randint(1, 2**62, (SAMPLED + 1,), generator=generator, dtype=torch.int64) | 1
        _WEIGHTS[key] = weights.to(device)
    return _WEIGHTS[key]


def sample_fingerprints(batch: Any, samples: Optional[int]) -> tuple[Optional[torch.Tensor], tuple]:
    """(fingerprints, row shapes) in one walk of the batch: an int64 tensor of `samples` fingerprints (on the batch's
    device), or None when no part of the batch has a row per sample (nothing to tell samples apart by); and the
    shape of one sample's row in each tensor, which changes between batches padded to their own longest sample
    (a sample's fingerprint then depends on its batch)."""
    total: Optional[torch.Tensor] = None
    shapes = []
    for part in _parts(batch):
        if isinstance(part, torch.Tensor):
            shapes.append(tuple(part.shape[1:]))
        rows = _row_hashes(part, samples) if samples else None
        if rows is not None:
            total = rows if total is None else total * 1_000_003 + rows.to(total.device)  # wraps: it is a hash
    return total, tuple(shapes)


def _parts(batch: Any):
    """The batch's leaves in a stable order (dict keys sorted): tensors, arrays, lists of strings or numbers."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for key in sorted(batch, key=str):
            yield from _parts(batch[key])
    elif isinstance(batch, (list, tuple)):
        if batch and all(isinstance(item, (str, bytes, int, float)) for item in batch):
            yield batch  # a column of strings or numbers: one per sample
        else:
            for item in batch:
                yield from _parts(item)
    elif hasattr(batch, "__array__") and hasattr(batch, "shape"):
        try:
            yield torch.from_numpy(batch)
        except (TypeError, ValueError):
            return


def _row_hashes(part: Any, samples: int) -> Optional[torch.Tensor]:
    if isinstance(part, (list, tuple)):
        if len(part) != samples:
            return None
        return torch.tensor([zlib.crc32(repr(item).encode()) for item in part], dtype=torch.int64)
    if part.layout != torch.strided or part.dim() == 0 or part.shape[0] != samples or part.is_complex() \
            or part.is_quantized or part.is_nested or part.device.type == "meta":
        return None
    rows = part.detach().reshape(samples, -1)
    width = rows.shape[1]
    if width > SAMPLED:
        # integer positions (linspace in float32 would round past the end of rows of 2**24 elements or more)
        rest = HEAD_ELEMENTS + torch.arange(STRIDED_ELEMENTS, device=rows.device) * (width - 1 - HEAD_ELEMENTS) \
            // (STRIDED_ELEMENTS - 1)
        head = torch.arange(HEAD_ELEMENTS, device=rows.device)
        rows = rows.index_select(1, torch.cat([head, rest]))
    bits = rows.contiguous()
    if bits.dtype in BITS:
        bits = bits.view(BITS[bits.dtype])
    # the row's dtype and shape are part of what was fed (crc32, not hash(): str hashes vary by process)
    shape_tag = zlib.crc32(f"{part.dtype}{tuple(part.shape[1:])}".encode())
    weights = _weights(rows.device)
    return (bits.to(torch.int64) * weights[:bits.shape[1]]).sum(dim=1) + shape_tag * weights[-1]
