"""Record real traces with torch.profiler on this machine, for the benchmark corpus: the options `diagnose run`
profiles with (CPU and, where present, CUDA activities, record_shapes, profile_memory; capture/session.py) and
with_stack=True, written by tensorboard_trace_handler as torch writes them (Kineto's pretty-printed layout, memory
events, python_function events). Grow them with grow_trace.py to the sizes of the speed table.

Usage: python benchmarks/record_traces.py OUT_DIR [--models mlp,convnet,transformer] [--steps 40]
Each model's trace is written gzipped as OUT_DIR/<model>.pt.trace.json.gz; one JSON line per trace is printed.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn


def mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """19 layers of Linear(256) and ReLU, batch 64: a step of many small host ops (the issue's 128k-event case)."""
    layers: list[nn.Module] = []
    for _ in range(19):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers), torch.randn(64, 256), torch.randn(64, 256)


def convnet() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Four convolutions at 32x32, batch 8: fewer, longer ops, bigger allocations."""
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 8, 3, padding=1), nn.Flatten(),
                          nn.Linear(8 * 32 * 32, 10))
    return model, torch.randn(8, 3, 32, 32), torch.randn(8, 10)


def transformer() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Two encoder layers, d=64, sequence 32, batch 4: attention's ops and their Python modules."""
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2), torch.randn(4, 32, 64), torch.randn(4, 32, 64)


MODELS = {"mlp": mlp, "convnet": convnet, "transformer": transformer}


def record(name: str, steps: int, out_dir: Path) -> dict:
    torch.manual_seed(0)
    model, inputs, targets = MODELS[name]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as folder:
        profiler = torch.profiler.profile(
            activities=activities, record_shapes=True, profile_memory=True, with_stack=True,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=steps),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(folder, worker_name=name))
        with profiler:
            for _ in range(steps + 2):
                optimizer.zero_grad()
                loss = ((model(inputs) - targets) ** 2).mean()
                loss.backward()
                optimizer.step()
                profiler.step()
        written = next(Path(folder).glob("*.pt.trace.json"))
        out = out_dir / f"{name}.pt.trace.json.gz"
        with written.open("rb") as source, gzip.open(out, "wb", compresslevel=6) as target:
            shutil.copyfileobj(source, target)
        text = written.read_bytes()
    return {"out": str(out), "model": name, "steps": steps, "events": text.count(b'"ph"'),
            "memory_events": text.count(b'"[memory]"'), "python_functions": text.count(b'"python_function"'),
            "json_bytes": len(text), "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=40, help="profiled steps (default 40)")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        print(json.dumps(record(name, args.steps, args.out_dir)), flush=True)


if __name__ == "__main__":
    main()
