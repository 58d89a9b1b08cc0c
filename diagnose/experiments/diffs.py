"""The change to make, as a unified diff of the user's script: keyword arguments set on the call that built
the DataLoader or optimizer (found with `ast` at the recorded file:line)."""
from __future__ import annotations

import ast
import difflib
from pathlib import Path
from typing import Optional

import diagnose.frameworks.catalog as frameworks
from diagnose.formatting import display_location
from diagnose.model import Change
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import Context


def call_at(tree: ast.AST, line: int) -> Optional[ast.Call]:
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
        call = call_at(ast.parse(source), int(line_text))
    except SyntaxError:
        return None
    if call is None:
        return None
    new_source = with_keywords(source, call, edits)
    diff = difflib.unified_diff(source.splitlines(keepends=True), new_source.splitlines(keepends=True),
                                f"a/{display_name}", f"b/{display_name}", n=1)
    return "".join(diff) or None


def _offset(source: str, line: int, col: int) -> int:
    lines = source.splitlines(keepends=True)
    return sum(len(x) for x in lines[: line - 1]) + len(lines[line - 1].encode()[:col].decode(errors="ignore"))


def with_keywords(source: str, call: ast.Call, edits: dict[str, str]) -> str:
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


def change_text(changes: tuple[Change, ...], ctx: Context) -> str:
    """The changes as a diff of the user's script (or the framework's setting), else a snippet to adapt. Changes to
    the same call (workers and persistent workers on one DataLoader) are one edit of it: one diff per changed line,
    as the user makes it."""
    parts: list[tuple[str, str]] = []  # ("diff", location) once per call site, or ("code", snippet), in order
    edits_at: dict[str, dict[str, str]] = {}
    for change in changes:
        optimization = REGISTRY.get(change.id)
        if optimization is None:
            continue
        location, edits = framework_edits(change, ctx) or (site_location(optimization.site, ctx),
                                                             optimization.keyword_edits(change.setting))
        diff = keyword_diff(location, edits, _diff_name(location))
        if diff:
            if location not in edits_at:
                parts.append(("diff", location))
            edits_at.setdefault(location, {}).update(edits)
        if optimization.snippet_too or not diff:
            parts.append(("code", optimization.snippet(change.setting, ctx)))
    texts = [keyword_diff(value, edits_at[value], _diff_name(value)) if kind == "diff" else value
             for kind, value in parts]
    return "\n".join(t for t in texts if t)


def _diff_name(location: Optional[str]) -> str:
    """The script's path relative to the current folder, as `git apply` wants it (display_location takes
    path:line)."""
    return (display_location(location) or "").rpartition(":")[0].lstrip("/") if location else ""


def framework_edits(change: Change, ctx: Context) -> Optional[tuple[str, dict]]:
    """The change as a setting on the user's configuring call (TrainingArguments(...), Trainer(...)), when the
    script runs under a framework that has that setting; None: the change is to the user's own code."""
    site = ctx.capture.framework
    framework = frameworks.get(site.name) if site else None
    edits = framework.edits(change.id, change.setting) if framework else None
    if not edits or not site.location:
        return None
    return site.location, edits


def site_location(site: Optional[str], ctx: Context) -> Optional[str]:
    if site == "loader" and ctx.loader is not None:
        return ctx.loader.location
    if site == "optimizer" and ctx.capture.optimizers:
        return ctx.capture.optimizers[0].location
    if site == "compile" and ctx.capture.compilation is not None:
        return ctx.capture.compilation.call_location
    if site == "ddp" and ctx.capture.ddp is not None:
        return ctx.capture.ddp.location
    return None
