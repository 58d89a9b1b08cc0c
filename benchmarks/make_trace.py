"""Write a synthetic but realistic Kineto (torch.profiler) Chrome trace, for benchmarks.

The layout copies real GPU traces (see tests/data/traces, e.g. a100_rank0_of16_host_syncs.json.gz):
the same top-level keys (schemaVersion, deviceProperties, distributedInfo, record_shapes, traceEvents), the
same event categories, field names, `args` and pid/tid conventions, and the same pretty-printed text layout
(one field group per line), which HolisticTraceAnalysis relies on to find `"rank": N`.

What one training step holds, on a CPU process `pid` with a main thread and an autograd thread:
- `ProfilerStep#N` user_annotation spanning the step (main thread);
- `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` user_annotation at its start (collation ops
  inside), then the batch copied to the GPU: aten::to > aten::_to_copy > aten::copy_ > cudaMemcpyAsync, as
  `Memcpy HtoD (Pageable -> Device)` and `Memcpy HtoD (Pinned -> Device)` gpu_memcpy events with args.bytes;
- forward: per layer aten::linear > aten::t > aten::transpose > aten::as_strided, aten::linear > aten::addmm >
  cudaLaunchKernel, then aten::relu > cudaLaunchKernel; the loss (aten::cross_entropy_loss > ...);
- backward on the autograd thread: autograd::engine::evaluate_function: AddmmBackward0 > AddmmBackward0 >
  aten::mm > cudaLaunchKernel ..., AccumulateGrad, a cudaMemsetAsync -> `Memset (Device)` gpu_memset, and
  (world size > 1) an NCCL all-reduce kernel on its own stream;
- `Optimizer.step#SGD.step` user_annotation with aten::add_ launches;
- `loss.item()` at the end of the step, and now and then a metric: aten::item > aten::_local_scalar_dense >
  cudaMemcpyAsync (`Memcpy DtoH (Device -> Pageable)`) + cudaStreamSynchronize, which waits for the GPU.

Every launch is a cuda_runtime event with args.correlation, a GPU event (pid = device, tid = stream) with the
same args.correlation and the launching op's `External id`, and an `ac2g` flow pair (ph s on the CPU
thread, ph f on the stream). GPU events start no earlier than their launch and no earlier than the previous
event on their stream ends; cudaStreamSynchronize lasts until the stream drains.

`--gpu-bound` writes the case where the GPU is the bottleneck and nothing syncs: kernels run 30x longer, no
`.item()`, pinned copies only, and the host runs ahead of the GPU until CUDA's launch queue (1024 entries) is
full, after which each launch call blocks until a queued kernel finishes, as CUDA's do. Host-side step spans then
measure how fast the host enqueues; the GPU's step time is in the returned `gpu_us_per_step`.

`--no-markers` writes the same steps without their `ProfilerStep#N` spans (a trace recorded without a schedule
or `prof.step()`): one long run of training, with nothing to cut it at steps.

Usage: python benchmarks/make_trace.py OUT.json.gz [--events 1000000] [--steps 10] [--seed 0] [--gpu-bound]
    [--no-markers]
The output is deterministic for a given set of options.
"""
from __future__ import annotations

import argparse
import gzip
import heapq
import json
import random
import sys
from pathlib import Path

DEVICE_PROPERTIES = {
    "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84990623744,
    "computeMajor": 8, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,
    "numSms": 108, "sharedMemPerBlockOptin": 166912,
}
GEMM = "ampere_sgemm_128x64_tn"
GEMM_BWD = ("ampere_sgemm_128x128_nn", "ampere_sgemm_64x64_nt")
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar"
        "(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::"
        "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
        "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, "
        "c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()"
        "() const::{lambda(float)#1}, at::detail::Array<char*, 2>)")
THRESHOLD_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
                 "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, "
                 "at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl"
                 "<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, "
                 "at::detail::Array<char*, 3>)")
REDUCE = ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>"
          ", unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>"
          ", unsigned int, float, 4, 4>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
           "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)")
NLL = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>"
       "(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)")
NLL_BWD = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>"
           "(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)")
SOFTMAX_BWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
               "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, "
               "long)")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"

COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM = 7, 7, 20
LAUNCH_LATENCY_US = 6  # from the end of a launch call to the earliest start of its kernel
LAUNCH_QUEUE_DEPTH = 1024  # launches CUDA queues before a launch call blocks (--gpu-bound)
GPU_BOUND_SCALE = 30.0  # kernel time multiplier of --gpu-bound
# Events one layer adds to a step (forward 13, backward 33, optimizer 5, DDP all-reduce 6 per 16 layers: 52.4 measured)
# and those a step has besides its layers (annotations, data loading, copies, loss, item): sizes the model for --events.
EVENTS_PER_LAYER = 52.4
EVENTS_PER_STEP = 62


def x_event(cat, name, pid, tid, ts, dur, args) -> str:
    """One complete event, laid out as Kineto writes it."""
    return (f'  {{\n    "ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {ts}, "dur": {dur},\n    "args": {{\n      {json.dumps(args)[1:-1]}\n    }}\n  }}')


def flow_event(ph, ident, pid, tid, ts) -> str:
    end = ', "bp": "e"' if ph == "f" else ""
    return (f'  {{\n    "ph": "{ph}", "id": {ident}, "pid": {pid}, "tid": {tid}, "ts": {ts},\n'
            f'    "cat": "ac2g", "name": "ac2g"{end}\n  }}')


class Writer:
    """Writes events comma-separated. Events of one step are buffered: CPU events sorted by start (parents
    before children, as Kineto writes them), then the GPU events with their runtime calls and flows."""

    def __init__(self, fh, sort_keys: bool = False):
        self.fh = fh
        self.sort_keys = sort_keys  # each event's keys in sorted order ("args" first): not Kineto's layout
        self.count = 0
        self.cpu: list[tuple] = []
        self.gpu: list[str] = []

    def write(self, text: str) -> None:
        if self.count:
            self.fh.write(",\n")
        self.fh.write("  " + json.dumps(json.loads(text), sort_keys=True) if self.sort_keys else text)
        self.count += 1

    def flush_step(self) -> None:
        self.cpu.sort(key=lambda e: (e[0], -e[1]))
        for _, _, text in self.cpu:
            self.write(text)
        for text in self.gpu:
            self.write(text)
        self.cpu.clear()
        self.gpu.clear()


class Model:
    """Timeline state: a CPU clock, one clock per GPU stream, id counters and the op stack."""

    def __init__(self, out: Writer, rng: random.Random, *, pid: int, device: int, world_size: int, t0: int,
                 gpu_bound: bool = False, markers: bool = True):
        self.out, self.rng = out, rng
        self.gpu_bound, self.markers = gpu_bound, markers
        self.queued: list[int] = []  # end times of launched device work (a heap), for the launch queue's depth
        self.gpu_us = 0  # device time on the compute stream
        self.pid, self.main_thread, self.bwd_tid = pid, pid, pid + 17
        self.tid = self.main_thread
        self.device, self.world_size = device, world_size
        self.t = t0
        self.gpu = {COMPUTE_STREAM: t0, NCCL_STREAM: t0}
        self.ext = 0  # External id of cpu ops and annotations
        self.corr = 900000  # correlation ids of runtime calls
        self.seq = 40000
        self.stack: list[int] = []  # External ids of the open ops
        self.counts = {"steps": 0, "kernels": 0, "memcpy": 0, "memset": 0, "item": 0, "sync": 0}

    def jitter(self, base: float, spread: float = 0.15) -> int:
        return max(1, int(round(base * (1 + self.rng.uniform(-spread, spread)))))

    # -- CPU side ------------------------------------------------------------------------------------------
    def span(self, cat: str, name: str, body=None, *, self_us: float = 3, args: dict | None = None) -> None:
        """A cpu_op or user_annotation event around whatever `body` emits."""
        self.ext += 1
        ext = self.ext
        start = self.t
        self.t += self.jitter(self_us / 2)
        self.stack.append(ext)
        if body is not None:
            body()
        self.stack.pop()
        self.t += self.jitter(self_us / 2)
        full = {"External id": ext, "Record function id": 0, "Ev Idx": ext - 1}
        if cat == "cpu_op" and args:
            full.update(args)
        dur = self.t - start
        self.out.cpu.append((start, dur, x_event(cat, name, self.pid, self.tid, start, dur, full)))
        self.t += self.jitter(2)

    def op(self, name, body=None, self_us=3, dims=None, seq=True):
        args = {"Input Dims": dims or [[]], "Input type": ["float"] * len(dims or [[]])}
        if seq:
            args.update({"Fwd thread id": 0, "Sequence number": self.seq})
        self.span("cpu_op", name, body, self_us=self_us, args=args)

    # -- runtime calls and the GPU events they cause ---------------------------------------------------------
    def _runtime(self, name: str, cbid: int, ts: int, dur: int) -> int:
        self.corr += 1
        ext = self.stack[-1] if self.stack else 0
        self.out.gpu.append(x_event("cuda_runtime", name, self.pid, self.tid, ts, dur,
                                    {"External id": ext, "cbid": cbid, "correlation": self.corr}))
        return self.corr

    def launch(self, kind: str, name: str, gpu_us: float, *, stream: int = COMPUTE_STREAM, nbytes: int = 0,
               runtime: str = "cudaLaunchKernel", cbid: int = 211, blocking: bool = False) -> None:
        launch_ts = self.t
        rt_dur = max(self.jitter(5, 0.6), self._queue_wait(launch_ts))
        start = max(self.gpu[stream], launch_ts + rt_dur + self.jitter(LAUNCH_LATENCY_US, 0.5))
        dur = self.jitter(gpu_us * (GPU_BOUND_SCALE if self.gpu_bound and kind == "kernel" else 1))
        self.gpu[stream] = start + dur
        if self.gpu_bound:
            heapq.heappush(self.queued, start + dur)
        if stream == COMPUTE_STREAM:
            self.gpu_us += dur
        if blocking:  # a pageable copy: the call returns once the copy is done
            rt_dur = max(rt_dur, start + dur - launch_ts + 2)
        corr = self.corr + 1
        ext = self.stack[-1] if self.stack else 0
        args = {"External id": ext, "queued": 0, "device": self.device, "context": 1, "stream": stream,
                "correlation": corr}
        if kind == "kernel":
            blocks = self.rng.choice((64, 128, 256, 512, 1024))
            args.update({"registers per thread": self.rng.choice((32, 48, 90, 128)), "shared memory": 0,
                         "blocks per SM": round(blocks / 108, 7), "warps per SM": round(blocks * 4 / 108, 7),
                         "grid": [blocks, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 25})
            self.counts["kernels"] += 1
        else:
            args.update({"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / max(dur, 1) / 1e3, 6)})
            self.counts["memcpy" if kind == "gpu_memcpy" else "memset"] += 1
        # Kineto's order: the GPU event, its flow end, the runtime call, its flow start.
        self.out.gpu.append(x_event(kind, name, self.device, stream, start, dur, args))
        self.out.gpu.append(flow_event("f", corr, self.device, stream, start))
        self._runtime(runtime, cbid, launch_ts, rt_dur)
        self.out.gpu.append(flow_event("s", corr, self.pid, self.tid, launch_ts))
        self.t += rt_dur

    def _queue_wait(self, now: int) -> int:
        """With the launch queue full, a launch call returns only once the oldest queued work has finished."""
        while self.queued and self.queued[0] <= now:
            heapq.heappop(self.queued)
        if len(self.queued) < LAUNCH_QUEUE_DEPTH:
            return 0
        return heapq.heappop(self.queued) - now + 2

    def sync(self) -> None:
        """cudaStreamSynchronize: the host waits until the compute stream drains."""
        wait = max(self.gpu[COMPUTE_STREAM] - self.t, 0) + self.jitter(3)
        self._runtime("cudaStreamSynchronize", 131, self.t, wait)
        self.t += wait
        self.counts["sync"] += 1

    def item(self) -> None:
        def local_scalar():
            self.launch("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2, nbytes=4,
                        runtime="cudaMemcpyAsync", cbid=41)
            self.sync()
        self.counts["item"] += 1
        self.op("aten::item", lambda: self.op("aten::_local_scalar_dense", local_scalar, dims=[[]]), dims=[[]])


def make_layers(rng: random.Random, n_layers: int) -> list[dict]:
    """Per-layer widths and kernel times, fixed for the run so that steps look alike."""
    layers = []
    for _ in range(n_layers):
        width = rng.choice((512, 1024, 2048, 4096))
        layers.append({"in": width, "out": rng.choice((512, 1024, 2048, 4096)),
                       "gemm_us": rng.uniform(15, 120) * width / 2048, "elt_us": rng.uniform(3, 12)})
    return layers


def step(m: Model, number: int, layers: list[dict], batch: int) -> None:
    rng = m.rng

    def dataloader_next():
        def collate():
            m.op("aten::stack", lambda: m.op("aten::cat", self_us=rng.uniform(200, 600), dims=[[batch, 3, 224, 224]]),
                 self_us=20, dims=[[batch, 3, 224, 224]], seq=False)
        # Some steps wait much longer for data than others, as a slow loader does.
        slow = rng.random() < 0.2
        m.span("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", collate,
               self_us=rng.uniform(3000, 9000) if slow else rng.uniform(100, 400))

    def to_device(pinned: bool, nbytes: int):
        def to_copy():
            m.op("aten::empty_strided", self_us=4, dims=[[], [], [], [], []], seq=False)
            name = "Memcpy HtoD (Pinned -> Device)" if pinned else "Memcpy HtoD (Pageable -> Device)"
            m.op("aten::copy_", lambda: m.launch("gpu_memcpy", name, nbytes / (20e3 if pinned else 6e3),
                                                 stream=COPY_STREAM, nbytes=nbytes, runtime="cudaMemcpyAsync",
                                                 cbid=41, blocking=not pinned),
                 self_us=6, dims=[[batch], [batch], []], seq=False)
        m.op("aten::to", lambda: m.op("aten::_to_copy", to_copy, self_us=4, seq=False), self_us=3, seq=False)

    def forward():
        for layer in layers:
            dims = [[batch, layer["in"]], [layer["out"], layer["in"]], [layer["out"]]]

            def linear(layer=layer, dims=dims):
                m.op("aten::t", lambda: m.op("aten::transpose",
                                             lambda: m.op("aten::as_strided", self_us=1, dims=[[], [], []]),
                                             self_us=2, dims=[[], [], []]), self_us=2, dims=[[]])
                m.op("aten::addmm", lambda: m.launch("kernel", GEMM, layer["gemm_us"]), self_us=10, dims=dims)
            m.op("aten::linear", linear, self_us=4, dims=dims)
            m.op("aten::relu", lambda layer=layer: m.launch("kernel", RELU, layer["elt_us"]), self_us=6,
                 dims=[[batch, layer["out"]]])
            m.seq += 1

        def loss():
            m.op("aten::log_softmax", lambda: m.op("aten::_log_softmax", lambda: m.launch("kernel", SOFTMAX, 8),
                                                   self_us=6), self_us=3)
            m.op("aten::nll_loss_nd", lambda: m.op("aten::nll_loss", lambda: m.op(
                "aten::nll_loss_forward", lambda: m.launch("kernel", NLL, 5), self_us=6), self_us=3), self_us=3)
        m.op("aten::cross_entropy_loss", loss, self_us=4)

    def backward():
        m.tid = m.bwd_tid

        def evaluate(fn_name, body):
            m.span("cpu_op", f"autograd::engine::evaluate_function: {fn_name}",
                   lambda: m.op(fn_name, body, self_us=4, dims=[[]]), self_us=5)

        def loss_bwd():
            m.op("aten::nll_loss_backward", lambda: (
                m.op("aten::zero_", lambda: m.op("aten::fill_", lambda: m.launch(
                    "gpu_memset", "Memset (Device)", 2, nbytes=batch * 4000, runtime="cudaMemsetAsync", cbid=51),
                    self_us=4), self_us=2),
                m.launch("kernel", NLL_BWD, 5)), self_us=6)
        evaluate("NllLossBackward0", loss_bwd)
        evaluate("LogSoftmaxBackward0", lambda: m.op("aten::_log_softmax_backward_data",
                                                     lambda: m.launch("kernel", SOFTMAX_BWD, 8), self_us=5))
        for i, layer in enumerate(reversed(layers)):
            evaluate("ReluBackward0", lambda layer=layer: m.op(
                "aten::threshold_backward", lambda: m.launch("kernel", THRESHOLD_BWD, layer["elt_us"]), self_us=5))

            def addmm_bwd(layer=layer):
                m.op("aten::t", lambda: m.op("aten::transpose", self_us=2), self_us=2)
                m.op("aten::mm", lambda: m.launch("kernel", GEMM_BWD[0], layer["gemm_us"]), self_us=8)
                m.op("aten::mm", lambda: m.launch("kernel", GEMM_BWD[1], layer["gemm_us"]), self_us=8)
                m.op("aten::sum", lambda: m.launch("kernel", REDUCE, layer["elt_us"]), self_us=6)
            evaluate("AddmmBackward0", addmm_bwd)
            evaluate("torch::autograd::AccumulateGrad",
                     lambda layer=layer: m.op("aten::add_", lambda: m.launch("kernel", ADD, layer["elt_us"]),
                                              self_us=5))
            if m.world_size > 1 and i % 16 == 15:  # a DDP bucket is ready: all-reduce it
                m.span("user_annotation", "nccl:all_reduce", lambda: m.op(
                    "record_param_comms", lambda: m.launch("kernel", ALLREDUCE, 150, stream=NCCL_STREAM),
                    self_us=10, seq=False), self_us=4)
        m.tid = m.main_thread

    def optimizer():
        for layer in layers:
            m.op("aten::add_", lambda layer=layer: m.launch("kernel", ADD, layer["elt_us"]), self_us=5,
                 dims=[[layer["out"], layer["in"]], [layer["out"], layer["in"]], []], seq=False)

    def body():
        dataloader_next()
        to_device(pinned=m.gpu_bound, nbytes=batch * 3 * 224 * 224 * 4 // 64)  # pageable copies block the host
        to_device(pinned=True, nbytes=batch * 8)
        m.span("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", self_us=20)
        forward()
        # the main thread blocks in autograd while the autograd thread runs the backward ops
        backward()
        m.span("user_annotation", "Optimizer.step#SGD.step", optimizer, self_us=30)
        if m.gpu_bound:
            return  # nothing syncs: the host runs ahead
        m.item()  # loss.item()
        if rng.random() < 0.3:  # an occasional metric read
            m.op("aten::eq", lambda: m.launch("kernel", ADD, 3), self_us=6, seq=False)
            m.item()

    if m.markers:
        m.span("user_annotation", f"ProfilerStep#{number}", body, self_us=40)
    else:
        body()
    m.out.flush_step()
    m.counts["steps"] += 1
    m.t += m.jitter(30)


def write_trace(path: Path, *, events: int = 1_000_000, steps: int = 10, seed: int = 0, rank: int = 0,
                world_size: int = 8, first_step: int = 5, compresslevel: int = 6, gpu_bound: bool = False,
                markers: bool = True, sort_keys: bool = False) -> dict:
    """Write the trace; returns counts of what it holds (steps, events, kernels, ...)."""
    rng = random.Random(seed)
    n_layers = max(2, round((events / steps - EVENTS_PER_STEP) / EVENTS_PER_LAYER))
    layers = make_layers(rng, n_layers)
    pid, device = 4515 + seed, rank % 8
    t0 = 1_700_000_000_000_000 + rng.randrange(10**6)
    opener = gzip.open(path, "wt", compresslevel=compresslevel) if str(path).endswith(".gz") else open(path, "w")
    with opener as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n')
        fh.write(",\n".join("    " + json.dumps({"id": i, **DEVICE_PROPERTIES}) for i in range(8)))
        fh.write('\n  ],\n')
        fh.write(f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n')
        fh.write('  "record_shapes": 1,\n  "traceEvents": [\n')
        out = Writer(fh, sort_keys)
        m = Model(out, rng, pid=pid, device=device, world_size=world_size, t0=t0 + 1000, gpu_bound=gpu_bound,
                  markers=markers)
        for i in range(steps):
            step(m, first_step + i, layers, batch=64)
        end = max(m.t, *m.gpu.values())
        out.write(x_event("Trace", "PyTorch Profiler (0)", '"Spans"', '"PyTorch Profiler"', t0, end - t0 + 100,
                          {"Op count": 0}))
        for event in _metadata(pid, m, device, t0):
            out.write("  " + json.dumps(event))
        out.write("  " + json.dumps({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                 "tid": "Trace PyTorch Profiler", "ts": t0}))
        out.write("  " + json.dumps({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
                                     "ts": end + 200}))
        fh.write('\n  ],\n  "traceName": ' + json.dumps(str(path)) + ',\n  "displayTimeUnit": "ms"\n}\n')
    return {"events": out.count, "layers": n_layers, "gpu_us_per_step": m.gpu_us / steps, **m.counts}


def _metadata(pid: int, m: Model, device: int, t0: int) -> list[dict]:
    ev = []
    meta = lambda name, p, t, args: ev.append({"name": name, "ph": "M", "ts": t0, "pid": p, "tid": t,  # noqa
                                               "args": args})
    meta("process_name", pid, 0, {"name": "python3"})
    meta("process_labels", pid, 0, {"labels": "CPU"})
    meta("process_sort_index", pid, 0, {"sort_index": pid})
    meta("process_name", device, 0, {"name": "python3"})
    meta("process_labels", device, 0, {"labels": f"GPU {device}"})
    meta("process_sort_index", device, 0, {"sort_index": 16777216 + device})
    for stream in sorted(m.gpu):
        meta("thread_name", device, stream, {"name": f"stream {stream} "})
        meta("thread_sort_index", device, stream, {"sort_index": stream})
    for tid in (m.main_thread, m.bwd_tid):
        meta("thread_name", pid, tid, {"name": f"thread {tid} (python3)"})
        meta("thread_sort_index", pid, tid, {"sort_index": tid})
    ev.append({"name": "process_sort_index", "ph": "M", "ts": t0, "pid": "Spans", "tid": 0,
               "args": {"sort_index": 536870912}})
    return ev


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output file, .json.gz or .json")
    parser.add_argument("--events", type=int, default=1_000_000, help="about how many trace events (default 1e6)")
    parser.add_argument("--steps", type=int, default=10, help="ProfilerStep spans (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--compresslevel", type=int, default=6, help="gzip level (default 6)")
    parser.add_argument("--gpu-bound", action="store_true", help="long kernels, no syncs: the host runs ahead")
    parser.add_argument("--no-markers", action="store_true", help="no ProfilerStep spans around the steps")
    parser.add_argument("--sorted-keys", action="store_true",
                        help="each event's keys sorted (args before ph): a layout the fast expressions do not read")
    args = parser.parse_args(argv)
    counts = write_trace(args.out, events=args.events, steps=args.steps, seed=args.seed, rank=args.rank,
                         world_size=args.world_size, compresslevel=args.compresslevel, gpu_bound=args.gpu_bound,
                         markers=not args.no_markers, sort_keys=args.sorted_keys)
    print(json.dumps({"path": str(args.out), **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
