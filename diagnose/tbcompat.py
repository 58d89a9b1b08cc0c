"""Make torch.profiler traces show DataLoader time in torch-tb-profiler's Overview.

torch-tb-profiler 0.4.3 builds events in ``profiler/trace.py::create_trace_event``,
which drops every ``cat: "user_annotation"`` event except ``ProfilerStep#N`` and
collectives. Since torch ~1.11 the ``enumerate(DataLoader)#...__next__`` ranges are
user annotations, so they never reach ``StepParser._parse_step`` (which would file
them under ``ProfileRole.DataLoader``) and the Overview shows 0% DataLoader.
Relabelling just those events as ``cat: "cpu_op"`` (what older torch wrote for
record_function ranges) lets the plugin see them. ``cat`` is only a label to
Perfetto and chrome://tracing, so names, timestamps, nesting and args stay as they were.
"""
from __future__ import annotations

import gzip
import os
import pathlib
import re
import stat
import tempfile

import orjson

_FROM_CAT = "user_annotation"
_TO_CAT = "cpu_op"  # maps to EventTypes.OPERATOR in the plugin's EventTypeMap
# the loader's names, as _is_dataloader_annotation tests them
_LOADER_NAME = rb'"enumerate\((?:DataLoader\)#[^"\\]*\.__next__|DataPipe\)#[^"\\]*)"'
# a DataLoader annotation as Kineto writes it ("ph", "cat", then "name"): relabelled in the text itself, with no
# Python object per event (a parse and a walk over every event took half of `diagnose run`'s analysis)
_LOADER_ANNOTATION = re.compile(rb'("ph":\s*"X"\s*,\s*"cat":\s*")(?i:user_annotation)("\s*,\s*"name":\s*'
                                + _LOADER_NAME + rb")")
_NAMED_AFTER_CATEGORY = re.compile(rb'"cat":\s*"[^"\\]*"\s*,\s*"name":\s*"enumerate\(Data')


def _is_dataloader_annotation(event: dict) -> bool:
    # Same name test as the plugin's _parse_step / create_operator_node, so we relabel
    # exactly what it would count as DataLoader and nothing else.
    name = event.get("name")
    cat = event.get("cat")
    if event.get("ph") != "X" or not isinstance(name, str) or not isinstance(cat, str):
        return False
    is_loader = (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) \
        or name.startswith("enumerate(DataPipe)#")
    return is_loader and cat.lower() == _FROM_CAT


def _read_text(path: pathlib.Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.name.endswith(".gz") else raw


def _write_atomic(path: pathlib.Path, data: bytes) -> None:
    # Temp file in the same directory + os.replace, so a TensorBoard scanning the
    # directory never sees a half-written trace. The ".tmp" suffix keeps the temp
    # name from matching the plugin's *.pt.trace.json(.gz) worker pattern.
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def adapt_trace_for_tensorboard(path: pathlib.Path) -> int:
    """Relabel DataLoader annotations in one trace file, in place.

    Returns the number of events changed; 0 (and no rewrite) when already adapted.
    """
    path = pathlib.Path(path)
    text = _read_text(path)
    if len(_NAMED_AFTER_CATEGORY.findall(text)) == text.count(b'"enumerate(Data'):  # each loader's as Kineto lays it
        relabelled, changed = _LOADER_ANNOTATION.subn(rb"\1" + _TO_CAT.encode() + rb"\2", text)
        if changed:
            _write_atomic(path, relabelled)
        return changed
    return _adapt_objects(path, orjson.loads(text))  # another layout: its events parsed


def _adapt_objects(path: pathlib.Path, trace) -> int:
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    changed = 0
    for event in events or ():
        if isinstance(event, dict) and _is_dataloader_annotation(event):
            event["cat"] = _TO_CAT
            changed += 1
    if changed:
        _write_atomic(path, orjson.dumps(trace))
    return changed


def tensorboard_overview(logdir: pathlib.Path) -> dict[str, float]:
    """Overview step-time breakdown of the traces in logdir, as torch-tb-profiler computes it.

    Uses the plugin's own RunProfileData + RunGenerator (what RunLoader runs in its
    worker processes), without a TensorBoard server or subprocesses. Keys are the
    plugin's category names ("DataLoader", "CPU Exec", "Other", ...); values are
    fractions of the average step time. Several trace files are pooled by summing
    their average-step costs.
    """
    # Lazy: torch_tb_profiler pulls in tensorboard, which most commands don't need.
    from torch_tb_profiler import consts
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    costs: dict[str, float] = {}
    total = 0.0
    with tempfile.TemporaryDirectory() as cache_dir:  # plugin may write a re-encoded copy here
        for path in sorted(pathlib.Path(logdir).iterdir()):
            match = consts.WORKER_PATTERN.match(path.name)
            if not match or not path.is_file():
                continue
            worker, span = match.group(1), match.group(2)
            data = RunProfileData.parse(worker, span, str(path), cache_dir)
            overview = RunGenerator(worker, span, data).generate_run_profile().overview
            step = overview["performance"][0]  # "Average Step Time", children = categories
            total += step["value"]
            for part in step["children"]:
                costs[part["name"]] = costs.get(part["name"], 0.0) + part["value"]
    return {name: value / total for name, value in costs.items()} if total else {}
