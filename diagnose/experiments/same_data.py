"""Did a variant train on the same data as the baseline? Compared by what each run fed the model (one fingerprint
per sample, measure.py), epoch by epoch: the same sequence, the same samples in another order, or different
samples (duplicated, missing, foreign). A loss that matches is not enough: an IterableDataset replayed by every
worker feeds each sample N times and its loss looks just as plausible."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

from diagnose.model import FedRecord

SAME_SEQUENCE, SAME_SAMPLES, DIFFERENT, UNCHECKED = "same-sequence", "same-samples", "different", "unchecked"
TOLERANCE_FRAC = 0.02  # of a segment's samples: more missing or foreign than this (and a batch) is different data
REPEAT_TOLERANCE = 1.05  # a variant repeating samples 5% more often than the baseline feeds duplicates
SLACK_FRAC = 0.25  # a partial epoch's last quarter may hold samples the other run feeds a little later


@dataclass(frozen=True)
class DataCheck:
    verdict: str  # same-sequence | same-samples | different | unchecked
    detail: str
    compared: int = 0  # samples compared


def check_variant(baseline: list[FedRecord], variant: list[FedRecord], random_items: Optional[str],
                  epoch_samples: Optional[int] = None) -> DataCheck:
    """The variant's runs against the baseline's first: its worst run decides. `random_items`: why the data
    cannot identify samples (the dataset returns random items), or None. `epoch_samples`: a map-style dataset's
    length (an epoch that fed it all is whole), None for a stream."""
    if random_items:
        return DataCheck(UNCHECKED, f"not checked: {random_items}, so samples cannot be matched across runs")
    if not baseline or not variant:
        return DataCheck(UNCHECKED, "not checked: no run to compare")
    if len(baseline) >= 2:
        own = compare_fed(baseline[0], baseline[1], epoch_samples)
        if own.verdict == DIFFERENT:
            return DataCheck(UNCHECKED, "not checked: the baseline's own runs fed different samples with the same "
                                        f"seeds ({own.detail}): random items or an unseeded order")
    checks = [compare_fed(baseline[0], run, epoch_samples) for run in variant]
    order = (DIFFERENT, UNCHECKED, SAME_SAMPLES, SAME_SEQUENCE)
    return min(checks, key=lambda c: order.index(c.verdict))


def compare_fed(base: FedRecord, other: FedRecord, epoch_samples: Optional[int] = None) -> DataCheck:
    """Epoch by epoch. The first epoch's order is set by the seeds before training draws any random number, so
    it must match as a sequence or, in another order, as the same samples; a later epoch's shuffle comes from the
    global generator after training used it (dropout), so there only duplicates count, or, when both runs fed
    the whole epoch, its multiset of samples."""
    if not base.fingerprints or not other.fingerprints:
        run = "baseline" if not base.fingerprints else "variant"
        return DataCheck(UNCHECKED, f"not checked: the {run}'s batches hold no tensor with a row per sample")
    base_epochs, other_epochs = _epochs(base), _epochs(other)
    slack = max(_batch_size(base), _batch_size(other))  # a last partial batch may differ (drop_last, sizes)
    compared, reordered = 0, False
    for index, (b, v) in enumerate(zip(base_epochs, other_epochs)):
        n = min(len(b), len(v))
        compared += n
        ended = index < len(base_epochs) - 1 and index < len(other_epochs) - 1  # both runs went on to another
        if ended and abs(len(b) - len(v)) > slack + TOLERANCE_FRAC * max(len(b), len(v)):
            return DataCheck(DIFFERENT, f"epoch {index + 1} fed {len(v)} samples, the baseline's {len(b)}", compared)
        if b[:n] == v[:n]:
            continue
        reordered = True
        whole = ended and (epoch_samples is None or abs(epoch_samples - n) <= slack)  # not cut short by the script
        repeats = _repeats(b[:n], v[:n], index)
        membership = _membership(b, v, n, index, whole, slack) if index == 0 or whole else None
        if membership and not repeats and (base.ragged or other.ragged):
            return DataCheck(UNCHECKED, "not checked: batches are padded to their longest sample (row widths vary), "
                                        "so a sample's fingerprint depends on its batch", compared)
        if repeats or membership:
            return DataCheck(DIFFERENT, "; ".join(p for p in (repeats, membership) if p), compared)
    if not reordered:
        return DataCheck(SAME_SEQUENCE, f"the same {compared} samples in the same order", compared)
    return DataCheck(SAME_SAMPLES, f"the same samples in another order ({compared} compared)", compared)


def _batch_size(fed: FedRecord) -> int:
    return max(1, round(len(fed.fingerprints) / max(fed.batches - fed.unhashable, 1)))


def _epochs(fed: FedRecord) -> list[list[int]]:
    values = list(fed.fingerprints)
    cuts = sorted({0, *(s for s in fed.epoch_starts if 0 < s < len(values)), len(values)})
    return [values[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _repeats(b: list[int], v: list[int], index: int) -> Optional[str]:
    """Duplicates, whatever the order: the variant feeds each sample more (or fewer) times than the baseline."""
    times_b, times_v = len(b) / len(set(b)), len(v) / len(set(v))
    if times_v > times_b * REPEAT_TOLERANCE:
        return (f"each sample fed {times_v / times_b:.1f} times as often as by the baseline: "
                f"{len(set(v))} distinct in the first {len(v)} samples of epoch {index + 1}, the baseline "
                f"{len(set(b))}")
    if times_b > times_v * REPEAT_TOLERANCE:
        return (f"the baseline fed each sample {times_b / times_v:.1f} times as often: {len(set(b))} distinct in "
                f"its first {len(b)} samples of epoch {index + 1}, the variant {len(set(v))}")
    return None


def _membership(b: list[int], v: list[int], n: int, index: int, whole: bool, slack: int) -> Optional[str]:
    """Missing or foreign samples. A whole epoch is compared as a multiset (a last partial batch apart); a partial
    one by its first three quarters against everything the other run fed in that epoch."""
    if whole:
        mine, theirs = Counter(b), Counter(v)
        missing = sum((mine - theirs).values())
        foreign = sum((theirs - mine).values())
        where, size = f"epoch {index + 1} (whole)", max(len(b), len(v))
    else:
        m = n - int(n * SLACK_FRAC)
        seen_b, seen_v = set(b), set(v)
        missing = sum(1 for x in b[:m] if x not in seen_v)
        foreign = sum(1 for x in v[:m] if x not in seen_b)
        where, size = f"the first {m} samples of epoch {index + 1}", m
    allowed = slack + TOLERANCE_FRAC * size
    if missing > allowed:
        return f"{missing / size:.0%} of the baseline's samples were never fed ({missing} of {size}, {where})"
    if foreign > allowed:
        return f"{foreign / size:.0%} of the samples fed were never fed by the baseline ({foreign} of {size}, {where})"
    return None
