"""The text readers' expressions with possessive repeats (Python 3.11 on) find exactly what the same expressions
with greedy repeats find, on every trace here: none of their repeats needs to give anything back."""
from __future__ import annotations

import gzip
import re
import sys

import pytest
from conftest import TRACES, trace_params

from diagnose.trace import fastparse, flop_ops, kept_steps, memory_events
from diagnose.trace.patterns import possessive

EXPRESSIONS = {"event": fastparse.FAST_EVENT, "flop op": flop_ops.FLOP_EVENT, "memory": memory_events.MEMORY_EVENT,
               "step mark": kept_steps.STEP_MARK, "launch mark": kept_steps.LAUNCH_MARK,
               "kernel mark": kept_steps.KERNEL_MARK, "start mark": kept_steps.START_MARK, "label": fastparse.LABEL,
               "thread": fastparse.THREAD}
ALL = sorted(p for p in TRACES.rglob("*.json*") if p.is_file() and p.name != "truth.json")


def _greedy(pattern: bytes) -> bytes:
    return re.sub(rb"(\\[sd]|\])([*+])\+", rb"\1\2", pattern)


def test_only_greedy_repeats_of_characters_become_possessive():
    pattern = rb'"a":\s*"([^"\\]*)"[^{}]*?(\d+)(?:x\s*)*\s*+'
    expected = rb'"a":\s*+"([^"\\]*+)"[^{}]*?(\d++)(?:x\s*+)*\s*+'
    assert possessive(pattern) == (expected if sys.version_info >= (3, 11) else pattern)


@pytest.mark.parametrize("path", trace_params(ALL))
def test_possessive_and_greedy_expressions_read_a_trace_alike(path):
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    for name, expression in EXPRESSIONS.items():
        greedy = re.compile(_greedy(expression.pattern))
        assert (greedy.pattern != expression.pattern) == (sys.version_info >= (3, 11)), name
        assert expression.findall(text) == greedy.findall(text), name
