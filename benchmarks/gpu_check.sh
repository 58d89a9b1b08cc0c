#!/usr/bin/env bash
# Is the step time diagnose reports the one the script runs at? On a CUDA machine, in one call of a few minutes:
# each GPU sample under `diagnose run --experiments none`, then the same script timed plainly (no profiler, no
# diagnose, the device synchronised at the timed window's edges only). Prints a table and exits 1 when a reported
# (unprofiled) step time is more than GPU_CHECK_TOLERANCE (default 0.15) away from the plain one. It also prints each
# run's energy per step as diagnose read it, and NVML's energy counter against its power samples over 3 s of work.
#
#   bash benchmarks/gpu_check.sh                                   # results under $OUT (default: a new temp folder)
#   GPU_CHECK_DEVICE=cpu bash benchmarks/gpu_check.sh              # the plumbing, on a CPU, with small sizes
#
# It installs nothing (GPU machines here have no network): it runs diagnose from this checkout (PYTHONPATH) with
# the torch that PYTHON (default python3) imports, and stops with the list of missing modules when one is absent.
# Where wheels of those modules are at hand: GPU_CHECK_WHEELS=DIR installs them offline (pip --no-index).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
TOLERANCE="${GPU_CHECK_TOLERANCE:-0.15}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
RESULTS="$(mktemp -d "$OUT/gpu_check.XXXX")"  # diagnose refuses to write into a used folder: a new one each time
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO"

missing_modules() {
  "$PYTHON" - <<'EOF'
import importlib.util, sys
if sys.version_info < (3, 11):
    print(f"python>=3.11 (this is {sys.version.split()[0]}; diagnose reads its rules with tomllib)")
needed = ["torch", "numpy", "jinja2", "click", "psutil", "orjson", "rich"]
print(" ".join(m for m in needed if importlib.util.find_spec(m) is None))
EOF
}

missing="$(missing_modules | xargs)"
if [[ -n "$missing" && -n "${GPU_CHECK_WHEELS:-}" ]]; then
  echo "installing from $GPU_CHECK_WHEELS (offline): $missing" >&2
  "$PYTHON" -m pip install -q --no-index --find-links "$GPU_CHECK_WHEELS" ${missing//torch/} >&2 || true
  missing="$(missing_modules | xargs)"
fi
if [[ -n "$missing" ]]; then
  echo "gpu_check: cannot run, missing for $PYTHON: $missing" >&2
  echo "  pip install $missing   (or GPU_CHECK_WHEELS=DIR with their wheels, offline)" >&2
  exit 2
fi
if [[ "$DEVICE" == cuda ]] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_check: torch.cuda.is_available() is False for $PYTHON; GPU_CHECK_DEVICE=cpu checks the plumbing" >&2
  exit 2
fi

# name | script and its arguments (the same for both runs) | how the plain run is timed
if [[ "$DEVICE" == cuda ]]; then
  CASES=(
    "gpu_bound_fp32|sample_runs/gpu_bound.py|own"
    "gpu_bound_bf16|sample_runs/gpu_bound.py --bf16|own"
    "cuda_train|sample_runs/cuda_train.py|hook"
    "compiled_branch|sample_runs/compiled_branch.py --device cuda|hook"
    "compiled_lengths|sample_runs/compiled_lengths.py --device cuda|hook"
  )
else
  export OMP_NUM_THREADS=1  # CPU runs on a shared machine: spinning intra-op threads made step times swing 5x
  CASES=(
    "gpu_bound_small|sample_runs/gpu_bound.py --device cpu --small|own"
    "cuda_train_cpu|sample_runs/cuda_train.py --device cpu --batch-size 2|hook"
  )
fi

plain_step_s() {  # the `plain_step_s=...` line a plain run prints
  sed -n 's/^plain_step_s=\([0-9.e-]*\).*/\1/p' "$1" | tail -n 1
}

for case in "${CASES[@]}"; do
  IFS='|' read -r name command timing <<<"$case"
  read -r -a words <<<"$command"
  echo "== $name: diagnose run ${words[*]}" >&2
  "$PYTHON" -m diagnose run --experiments none --out "$RESULTS/$name" "${words[@]}" \
    >"$RESULTS/$name.diagnose.log" 2>&1 || echo "   diagnose exited $? (see $RESULTS/$name.diagnose.log)" >&2
  echo "== $name: plain" >&2
  if [[ "$timing" == own ]]; then
    plain=("$PYTHON" "${words[@]}" --time-plain)
  else
    plain=("$PYTHON" benchmarks/time_plain.py "${words[@]}")
  fi
  "${plain[@]}" >"$RESULTS/$name.plain.log" 2>&1 || echo "   plain run exited $? (see $RESULTS/$name.plain.log)" >&2
  echo "$name $(plain_step_s "$RESULTS/$name.plain.log")" >>"$RESULTS/plain.txt"
done

# the device's peaks, measured, beside the datasheet's (the speed of light's denominators)
echo "== peak: diagnose peak --device $DEVICE --fresh" >&2
"$PYTHON" -m diagnose peak --device "$DEVICE" --fresh >"$RESULTS/peak.txt" 2>&1 || echo "   diagnose peak exited $?" >&2

# memory: a batch that does not fit under --memory-limit, the largest that does, and the variant that makes it fit
# (on the CPU only with GPU_CHECK_MEMORY=1: two minutes of short runs)
if [[ "$DEVICE" == cuda || -n "${GPU_CHECK_MEMORY:-}" ]]; then
  if [[ "$DEVICE" == cuda ]]; then
    memory=(--memory-limit 4GB tests/scripts/activation_heavy.py --device cuda --batch-size 65536 --samples 262144)
  else
    memory=(--memory-limit 700MB tests/scripts/activation_heavy.py --batch-size 8192)
  fi
  echo "== memory: diagnose run ${memory[*]}" >&2
  "$PYTHON" -m diagnose run --warmup 2 --steps 3 --budget-seconds 240 --out "$RESULTS/memory" "${memory[@]}" \
    >"$RESULTS/memory.diagnose.log" 2>&1 || echo "   diagnose exited $? (5: out of memory, as intended)" >&2
fi

# energy: NVML's total-energy counter over 3 s of matmuls beside the power samples' mean over the same time (the
# counter diagnose reads at the timed window's edges, and its fallback); each run's energy per step is in the table
if [[ "$DEVICE" == cuda ]]; then
  echo "== energy: the NVML counter against the power samples" >&2
  "$PYTHON" - >"$RESULTS/energy.txt" 2>&1 <<'EOF' || echo "   the energy check exited $?" >&2
import threading, time
import pynvml, torch
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
a = torch.randn(8192, 8192, device="cuda")
watts, done = [], threading.Event()
def sample():
    while not done.wait(0.05):
        watts.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000)
torch.cuda.synchronize()
sampler = threading.Thread(target=sample); sampler.start()
start, begin = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
while time.monotonic() - begin < 3.0:
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
end, seconds = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic() - begin
done.set(); sampler.join()
counter_w = (end - start) / 1000 / seconds
mean_w = sum(watts) / len(watts)
print(f"energy counter: {(end - start) / 1000:.1f} J over {seconds:.2f} s = {counter_w:.0f} W; "
      f"{len(watts)} power samples: mean {mean_w:.0f} W (counter / samples {counter_w / mean_w:.2f})")
EOF
fi

"$PYTHON" - "$RESULTS" "$TOLERANCE" <<'EOF'
import json, sys
from pathlib import Path

results, tolerance = Path(sys.argv[1]), float(sys.argv[2])
plain = dict(line.split() if len(line.split()) == 2 else (line.strip(), "") for line in
             (results / "plain.txt").read_text().splitlines())
ms = lambda s: f"{s * 1e3:.1f} ms" if s else "n/a"
print(f"{'script':<18} {'diagnose step':>14} {'profiled step':>14} {'plain step':>12} {'ratio':>7}  verdict")
failed = False
for name, text in plain.items():
    path = results / name / "diagnosis.json"
    step = json.loads(path.read_text())["step_time_s"] if path.exists() else {}
    reported, profiled = step.get("unprofiled"), step.get("mean")
    reference = float(text) if text else None
    ratio = reported / reference if reported and reference else None
    ok = ratio is not None and abs(ratio - 1) <= tolerance
    failed |= not ok
    verdict = "ok" if ok else ("no figure" if ratio is None else f"off by more than {tolerance:.0%}")
    print(f"{name:<18} {ms(reported):>14} {ms(profiled):>14} {ms(reference):>12} "
          f"{(f'{ratio:.2f}' if ratio else 'n/a'):>7}  {verdict}")
for name in plain:  # what each diagnosed run read of the device's energy (not a check: the figures, or why none)
    path = results / name / "diagnosis.json"
    cost = json.loads(path.read_text()).get("run_cost") if path.exists() else None
    if cost and cost.get("energy_per_step_j") is not None:
        print(f"energy {name}: {cost['energy_per_step_j']:.3g} J per step ({'; '.join(cost['energy_sources'])})")
    elif cost:
        print(f"energy {name}: unavailable ({cost.get('energy_note', '')})")
energy = results / "energy.txt"
if energy.exists():
    print(energy.read_text().rstrip())
peak = results / "peak.txt"
if peak.exists():
    print(peak.read_text().rstrip())
memory = results / "memory" / "diagnosis.json"
if memory.exists():
    d = json.loads(memory.read_text())
    search, head, gib = d.get("batch_search") or {}, d.get("headline") or {}, lambda b: f"{b / 2**30:.2f} GiB"
    print(f"memory: status {d['status']}; largest batch that fits {search.get('largest_fitting')}, "
          f"{search.get('smallest_failing')} does not (limit {gib(search.get('limit_bytes') or 0)}); "
          f"fastest that fits: {', '.join(head.get('changes', ())) or 'none'} at "
          f"{head.get('throughput') or 0:.0f} {head.get('metric', '')}")
    for e in d["experiments"]:
        peak = gib(e["peak_memory_bytes"]) if e.get("peak_memory_bytes") else "n/a"
        print(f"  {e['optimization']:<26} {e['verdict']:<14} peak {peak:<10} {e['reason']}")
print(f"(runs in {results})")
sys.exit(1 if failed else 0)
EOF
