"""The pieces of the regular expressions that read Kineto's text (fastparse, flop_ops, memory_events, window),
written once, and `compiled`, which makes their repeats possessive where Python has them (3.11 on): none of these
repeats ever needs to give back what it matched (each stops at a character the piece after it begins with), and
a possessive repeat spares the engine its backtracking bookkeeping (the event expression: 16% faster)."""
from __future__ import annotations

import re
import sys

ID_TEXT = rb'-?\d+|"[^"\\]*"'  # a pid or tid: a number, or a string without escapes
STRING_TEXT = rb'[^"\\]*(?:\\.[^"\\]*)*'  # unrolled: much faster than (?:[^"\\]|\\.)*
NUMBER = rb"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
ID = rb"(" + ID_TEXT + rb")"
STRING = rb'"(' + STRING_TEXT + rb')"'
# between two members: torch 2.13's pretty-printed layout puts a line break before some commas ("dur": 1.5\n    ,)
SEP = rb"\s*,\s*"

# a greedy repeat of \s, \d or a negated class (not a lazy one, not one already possessive)
_GREEDY_REPEAT = re.compile(rb"(\\[sd]|\[\^(?:\\.|[^\]\\])*\])([*+])(?![?+])")


def compiled(pattern: bytes) -> re.Pattern:
    """`pattern` compiled, its greedy repeats of \\s, \\d and negated classes possessive where Python has them."""
    return re.compile(possessive(pattern))


def possessive(pattern: bytes) -> bytes:
    return _GREEDY_REPEAT.sub(rb"\1\2+", pattern) if sys.version_info >= (3, 11) else pattern
