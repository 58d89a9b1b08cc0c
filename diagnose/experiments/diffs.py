"""The change to make, as a unified diff of the user's script: keyword arguments set on the call that built
the DataLoader or optimizer (found with `ast` at the recorded file:line)."""
from __future__ import annotations

import ast
import difflib
from pathlib import Path
from typing import Optional


def _call_at(tree: ast.AST, line: int) -> Optional[ast.Call]:
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    starting = [c for c in calls if c.lineno == line] or calls
    return min(starting, key=lambda c: (c.end_lineno or 0) - c.lineno, default=None) if starting else None


def keyword_diff(location: Optional[str], edits: dict[str, str], display_name: str) -> Optional[str]:
    """A unified diff that sets `edits` (keyword -> source text) on the call at `location`, or None."""
    if not location or not edits:
        return None
    path_text, _, line_text = location.rpartition(":")
    path = Path(path_text)
    if not line_text.isdigit() or not path.is_file():
        return None
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        call = _call_at(ast.parse(source), int(line_text))
    except SyntaxError:
        return None
    if call is None:
        return None
    new_source = _with_keywords(source, call, edits)
    diff = difflib.unified_diff(source.splitlines(keepends=True), new_source.splitlines(keepends=True),
                                f"a/{display_name}", f"b/{display_name}", n=1)
    return "".join(diff) or None


def _offset(source: str, line: int, col: int) -> int:
    lines = source.splitlines(keepends=True)
    return sum(len(x) for x in lines[: line - 1]) + len(lines[line - 1].encode()[:col].decode(errors="ignore"))


def _with_keywords(source: str, call: ast.Call, edits: dict[str, str]) -> str:
    replacements: list[tuple[int, int, str]] = []
    remaining = dict(edits)
    for kw in call.keywords:
        if kw.arg in remaining:
            start = _offset(source, kw.value.lineno, kw.value.col_offset)
            end = _offset(source, kw.value.end_lineno, kw.value.end_col_offset)
            replacements.append((start, end, remaining.pop(kw.arg)))
    if remaining:
        end = _offset(source, call.end_lineno, call.end_col_offset) - 1  # just before the closing parenthesis
        has_args = bool(call.args or call.keywords)
        added = ", ".join(f"{k}={v}" for k, v in remaining.items())
        replacements.append((end, end, (", " if has_args else "") + added))
    for start, end, text in sorted(replacements, reverse=True):
        source = source[:start] + text + source[end:]
    return source
