"""torch-tb-profiler's Overview must report the real DataLoader share after adaptation."""
from __future__ import annotations

import gzip
import json
import logging
import pathlib
import time

import orjson
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from diagnose.tbcompat import adapt_trace_for_tensorboard, tensorboard_overview

LOADER_PREFIX = "enumerate(DataLoader)#"


class SlowDataset(Dataset):
    """~4 ms per item, so a batch of 8 takes ~32 ms: loading dominates the step."""

    def __len__(self) -> int:
        return 8 * 12

    def __getitem__(self, i: int):
        time.sleep(0.004)
        return torch.randn(16), torch.randn(1)


def _record(tb_dir: pathlib.Path, num_workers: int, with_stack: bool) -> pathlib.Path:
    # In-process: a subprocess per trace costs seconds of torch import for nothing.
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=8, num_workers=num_workers)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tb_dir), worker_name="w0"),
        with_stack=with_stack, record_shapes=with_stack, profile_memory=with_stack,
    ) as prof:
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if step >= 6:
                break
    (trace,) = tb_dir.glob("w0.*.pt.trace.json*")
    return trace


def _load(path: pathlib.Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)  # strict stdlib JSON


def _true_loader_share(trace: dict) -> float:
    """Sum of DataLoader waits inside ProfilerStep spans / sum of ProfilerStep durations."""
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["name"].startswith("ProfilerStep#")]
    waits = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["name"].startswith(LOADER_PREFIX)]
    inside = sum(end - start for start, end in waits if any(a <= start and end <= b for a, b in steps))
    return inside / sum(b - a for a, b in steps)


def _without_cat(trace: dict) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "cat"} for e in trace["traceEvents"]]


@pytest.mark.parametrize(
    "num_workers,with_stack",
    [(0, False), (2, False), (0, True)],
    ids=["single-process", "two-workers", "python-stack+memory"],
)
def test_overview_reports_real_dataloader_share(tmp_path, caplog, num_workers, with_stack):
    path = _record(tmp_path / "tb", num_workers, with_stack)
    before = _load(path)
    true_share = _true_loader_share(before)
    if num_workers == 0:  # with workers, prefetching and machine load make the share vary (0.1-0.9)
        assert true_share > 0.3, "the slow dataset should dominate the step"
    assert tensorboard_overview(path.parent)["DataLoader"] < 0.01  # the bug being fixed

    caplog.set_level(logging.INFO, logger="pytorch_profiler")
    changed = adapt_trace_for_tensorboard(path)
    assert changed == sum(e.get("name", "").startswith(LOADER_PREFIX) for e in before["traceEvents"])
    assert changed >= 4  # one per active step
    iterator = "_MultiProcessingDataLoaderIter" if num_workers else "_SingleProcessDataLoaderIter"
    assert any(iterator in e.get("name", "") for e in before["traceEvents"])

    overview = tensorboard_overview(path.parent)
    assert abs(overview["DataLoader"] - true_share) < 0.10, (overview, true_share)
    assert abs(sum(overview.values()) - 1.0) < 0.01  # no double counting across categories
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text

    after = _load(path)  # still valid JSON for Perfetto / chrome://tracing
    assert _without_cat(after) == _without_cat(before)  # same events, timestamps, args, order
    assert {k: v for k, v in after.items() if k != "traceEvents"} == \
        {k: v for k, v in before.items() if k != "traceEvents"}
    assert adapt_trace_for_tensorboard(path) == 0  # idempotent


def _x(name: str, cat: str, ts: int, dur: int) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur, "args": {}}


def test_gz_nested_and_catless_events(tmp_path):
    # Two 1000 us steps; each has a 600 us DataLoader wait with a nested DataPipe range
    # and a collate op inside it, then 200 us of compute. Metadata/instant events
    # have no "cat", as torch writes them.
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 7, "tid": 7, "ts": 0},
    ]
    for base in (0, 1000):
        events += [
            _x(f"ProfilerStep#{base // 1000 + 1}", "user_annotation", base, 1000),
            _x(LOADER_PREFIX + "_SingleProcessDataLoaderIter.__next__", "user_annotation", base + 10, 600),
            _x("enumerate(DataPipe)#MapperIterDataPipe", "user_annotation", base + 20, 300),
            _x("aten::stack", "cpu_op", base + 400, 100),
            _x("aten::mm", "cpu_op", base + 700, 200),
        ]
    tb = tmp_path / "tb"
    tb.mkdir()
    path = tb / "w0.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))

    assert tensorboard_overview(tb)["DataLoader"] == 0.0
    assert adapt_trace_for_tensorboard(path) == 4  # DataLoader + DataPipe, twice
    overview = tensorboard_overview(tb)
    # Nested ranges are merged, and aten::stack inside the wait is not also CPU Exec.
    assert overview == pytest.approx({"DataLoader": 0.6, "CPU Exec": 0.2, "Other": 0.2})
    assert _without_cat(_load(path)) == _without_cat({"traceEvents": events})
    assert adapt_trace_for_tensorboard(path) == 0
    assert [p.name for p in tb.iterdir()] == [path.name]  # no temp file left behind


@pytest.mark.parametrize("layout", ["kineto", "compact", "name_first"])
def test_the_text_is_relabelled_as_its_parsed_events_are(tmp_path, layout):
    # Kineto's order ("ph", "cat", "name") is relabelled in the text, with no object per event; any other order
    # is parsed and walked: both give the same events
    from diagnose import tbcompat

    events = [_x(LOADER_PREFIX + "_SingleProcessDataLoaderIter.__next__", "user_annotation", 10, 5),
              _x("enumerate(DataPipe)#MapperIterDataPipe", "User_Annotation", 11, 1),
              _x(LOADER_PREFIX + "_SingleProcessDataLoaderIter.__next__", "cpu_op", 20, 5),
              {**_x(LOADER_PREFIX + "_SingleProcessDataLoaderIter.__next__", "user_annotation", 30, 0), "ph": "i"},
              _x("ProfilerStep#1", "user_annotation", 0, 40)]
    if layout == "name_first":
        events = [{"name": e["name"], **e} for e in events]
    text = {"kineto": lambda d: json.dumps(d, indent=1).encode(), "compact": orjson.dumps,
            "name_first": lambda d: json.dumps(d).encode()}[layout]({"traceEvents": events})
    path, objects = tmp_path / "w0.1.pt.trace.json", tmp_path / "objects.json"
    path.write_bytes(text)
    objects.write_bytes(text)
    parsed = json.loads(text)
    assert adapt_trace_for_tensorboard(path) == tbcompat._adapt_objects(objects, parsed) == 2
    assert _load(path) == parsed
