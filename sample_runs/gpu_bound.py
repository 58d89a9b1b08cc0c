"""GPU-bound training: a wide fp32 MLP whose steps are all GEMMs, with nothing in the loop that syncs.

Run it on a CUDA GPU:

    diagnose run sample_runs/gpu_bound.py                 # fp32: the tensor-core rule should fire
    python sample_runs/gpu_bound.py --time-plain          # the same steps, timed by the script itself

What it shows:
- the batches are slices of a tensor already on the device, and the loop never reads a value back (no .item(),
  no printing of the loss): the host enqueues kernels and races ahead of the GPU, so host-side step spans
  say little about the step time; the GPU's timeline and a synchronised timing do;
- fp32 matmuls with TF32 off (`--tf32` turns it on) and autocast written as scripts with a flag write it,
  `torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16)`: without `--bf16` the region is entered
  disabled and the model runs in fp32 (diagnose must not count it as autocast used).
The default sizes (8192 wide, 6 layers, batch 2048: about 5 TFLOP per step) take roughly 100 ms per step in
fp32 on an H200 (an estimate from its fp32 rate, not a measurement). `--small` shrinks them for a CPU.

`--time-plain` warms up, then times `--timed-steps` steps with the device synchronised at the window's two
edges only, and prints one line: `plain_step_s=<seconds per step> steps=<n> device=<device>`.
"""
import argparse
import sys
import time

import torch
from torch import nn

SMALL = {"width": 256, "layers": 3, "batch_size": 64}


def make_model(width: int, layers: int, n_classes: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks, nn.Linear(width, n_classes))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=400, help="training steps the script would run")
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--small", action="store_true", help=f"small sizes for a CPU: {SMALL}")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (the region is entered disabled without)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls")
    parser.add_argument("--time-plain", action="store_true", help="time the steps and print plain_step_s=...")
    parser.add_argument("--warmup-steps", type=int, default=10, help="with --time-plain: steps before the timing")
    parser.add_argument("--timed-steps", type=int, default=20, help="with --time-plain: steps timed")
    args = parser.parse_args()
    if args.small:
        vars(args).update(SMALL)
    return args


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    args = parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_bound.py needs a CUDA GPU (torch.cuda.is_available() is False); use --device cpu --small to run it "
              "on the CPU", file=sys.stderr)
        sys.exit(2)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # intra-op threads spin on a shared machine: step times would swing 5x
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32  # fp32 GEMMs on CUDA cores unless asked
    torch.backends.cudnn.allow_tf32 = args.tf32

    n_classes, n_batches = 1000, 4
    inputs = torch.randn(n_batches * args.batch_size, args.width, device=device)
    labels = torch.randint(0, n_classes, (n_batches * args.batch_size,), device=device)
    model = make_model(args.width, args.layers, n_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    timed_from = args.warmup_steps if args.time_plain else None
    total = args.warmup_steps + args.timed_steps if args.time_plain else args.steps

    for step in range(total):
        if step == timed_from:
            synchronize(device)  # the window starts with an empty queue; no sync inside it
            start = time.perf_counter()
        rows = slice((step % n_batches) * args.batch_size, (step % n_batches + 1) * args.batch_size)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_fn(model(inputs[rows]), labels[rows])
        loss.backward()
        optimizer.step()
    synchronize(device)
    if timed_from is not None:
        seconds = (time.perf_counter() - start) / args.timed_steps
        print(f"plain_step_s={seconds:.6f} steps={args.timed_steps} device={device}", flush=True)
    print(f"done: loss {loss.item():.4f}", flush=True)  # one read-back, after the loop


if __name__ == "__main__":
    main()
