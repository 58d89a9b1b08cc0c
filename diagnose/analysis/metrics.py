"""The named metrics that rules are written against. Each has a description; values are numbers or None
(unknown: no GPU, no loader...). Rules that name a metric missing from METRICS fail to load."""
from __future__ import annotations

METRICS: dict[str, str] = {
    # training itself
    "loss_nonfinite": "1 when a loss passed to backward() was NaN or inf, 0 when all were finite (run mode: every "
                      "step's loss, read back once at the end)",
    "loss_nonfinite_step": "the step (from 0, warm-up included) whose loss was first NaN or inf",
    "loss_last_finite": "the last finite loss before it (None when none was)",
    # step time and breakdown
    "steps_profiled": "number of complete steps in the profiled window",
    "step_time_mean_s": "mean step wall time, seconds",
    "step_time_p50_s": "median step wall time, seconds",
    "step_time_p95_s": "95th percentile step wall time, seconds",
    "step_time_cv": "coefficient of variation of step times (std / mean)",
    "step_time_unprofiled_s": "seconds per step timed before the profiled window, the profiler off (device "
                              "synchronised at the window's edges; run mode only)",
    "profiler_overhead_factor": "mean profiled step time / unprofiled step time (how much the profiler slowed steps)",
    "data_wait_frac": "share of step time waiting for the next batch from the DataLoader",
    "h2d_frac": "share of step time in host-to-device copies not hidden by kernels",
    "compute_frac": "share of step time in torch ops (GPU kernels on a GPU run, CPU ops on a CPU run)",
    "communication_frac": "share of step time in collectives (NCCL/gloo) not hidden by compute",
    "host_overhead_frac": "share of step time the host keeps the compute waiting: outside any torch op and data wait "
                          "(Python, logging, sleeps); on GPU runs all host time while the GPU idles",
    "other_frac": "share of step time in other GPU activity (memsets, device-to-host copies)",
    # devices
    "has_gpu": "1 when the run used a GPU (GPU events in the trace or CUDA memory in use), else 0",
    "cpu_count": "CPU cores available to the process",
    "gpu_busy_frac": "share of step time with at least one GPU kernel running (from the trace)",
    "gpu_util_mean_frac": "mean NVML GPU utilization during the profiled window (not the same as gpu_busy_frac)",
    "gpu_idle_frac": "share of step time with no kernel, copy or memset running on the GPU",
    "gpu_idle_data_wait_frac": "share of step time the GPU idles while the host waits for the DataLoader",
    "gpu_idle_sync_frac": "share of step time the GPU idles while the host is in a sync (.item(), synchronize, "
                          "cudaMemcpy)",
    "gpu_idle_after_sync_frac": "share of step time in GPU idle gaps that a sync opened (from its return until the "
                                "host launches again)",
    "gpu_idle_runtime_frac": "share of step time the GPU idles while the host is in other CUDA/HIP runtime calls "
                             "(launches, event queries)",
    "gpu_idle_cpu_ops_frac": "share of step time the GPU idles while the host runs torch ops on the CPU",
    "gpu_idle_python_frac": "share of step time the GPU idles while the host is outside torch (Python, logging, I/O)",
    "kernels_per_step": "GPU kernels launched per step",
    "kernel_mean_us": "mean GPU kernel duration, microseconds",
    "launches_per_step": "runtime calls per step that put work on the GPU (kernel launches, copies, memsets)",
    "optimizer_launch_frac": "share of the step's GPU launches made inside optimizer.step() and zero_grad()",
    "optimizer_host_frac": "share of step time the host spends inside optimizer.step() and zero_grad()",
    "optimizer_multi_tensor": "1 when the optimizer was built with fused=True or foreach=True, 0 with foreach=False "
                              "(one kernel per parameter), unknown when left to torch's default or from a trace",
    "launch_to_kernel_ratio": "median host time of a kernel launch call / median kernel time (>=1: launch-bound)",
    "h2d_copy_frac": "share of step time with a host-to-device copy running (overlapped or not)",
    "h2d_gpu_share": "share of the GPU's active time (kernels, copies, memsets) spent copying host to device",
    "d2h_copy_frac": "share of step time with a device-to-host copy running",
    "d2d_copy_frac": "share of step time with a device-to-device copy running",
    "memset_frac": "share of step time with a GPU memset running",
    "pageable_h2d_per_step": "host-to-device copies from pageable (unpinned) memory per step",
    "pageable_d2h_per_step": "device-to-host copies into pageable memory per step",
    "sync_copies_per_step": "synchronous cudaMemcpy/hipMemcpy calls per step (the host blocks on each)",
    "comm_kernel_frac": "share of step time with a collective (NCCL/RCCL) kernel running, overlapped or not",
    "comm_overlap_frac": "share of collective kernel time that overlaps compute kernels (1 = fully hidden)",
    "allreduces_per_step": "all-reduce calls per optimizer step (one per DDP bucket and backward that syncs), from "
                           "the trace",
    "ddp_find_unused_frac": "share of step time DistributedDataParallel spends finding unused parameters after each "
                            "forward (find_unused_parameters=True), from the trace",
    "allgathers_per_step": "all-gather calls per optimizer step (FSDP gathers each unit's parameters before its "
                           "forward, and again before its backward when it resharded), from the trace",
    "fsdp_used": "1 when the script shards its model with FSDP2's fully_shard(), 0 when it does not (run mode)",
    "fsdp_units": "fully_shard() calls: the modules FSDP2 shards as units, the root included",
    "fsdp_resharding_units": "units that free their gathered parameters after forward (reshard_after_forward) and "
                             "gather them again for backward",
    "ddp_used": "1 when the script wraps its model in DistributedDataParallel, 0 when it does not (run mode)",
    "ddp_find_unused_parameters": "1 when DistributedDataParallel was built with find_unused_parameters=True",
    "ddp_static_graph": "1 when DistributedDataParallel was built with static_graph=True",
    "ddp_gradient_as_bucket_view": "1 when DistributedDataParallel was built with gradient_as_bucket_view=True",
    "ddp_bucket_cap_mb": "DistributedDataParallel's bucket_cap_mb as built (torch's default: 25)",
    "ddp_broadcast_buffers": "1 when DistributedDataParallel broadcasts the module's buffers before each forward",
    "ddp_gradient_mb": "MiB of gradients DistributedDataParallel all-reduces in one synced backward",
    "ddp_unused_parameters": "the most parameters that got no gradient in one backward (0: every parameter got one "
                             "in every backward seen)",
    "ddp_backwards_per_step": "backward() calls through DistributedDataParallel per optimizer step (gradient "
                              "accumulation: several)",
    "ddp_synced_backwards_per_step": "of those, the ones that all-reduced the gradients (their forward ran outside "
                                     "no_sync())",
    "world_size": "processes in DistributedDataParallel's (or FSDP2's) process group",
    "collective_wait_frac": "share of step time in collectives, host or GPU side (time a rank waits on the others)",
    "rank_count": "ranks analysed together (one trace each)",
    "rank": "the rank the diagnosis is about (the straggler when there is one, else the lowest)",
    "straggler_rank": "the rank the others wait for in collectives (None when no rank stands out)",
    "straggler_compute_ratio": "the straggler's compute seconds per step over the other ranks' mean (well above 1: its "
                               "device computes the same work slower)",
    "collective_wait_spread": "largest minus smallest share of step time in collectives across ranks",
    "collective_wait_max_frac": "share of step time in collectives of the rank that waits most",
    "step_time_spread": "(slowest - fastest) / fastest mean step time across ranks",
    "tensor_core_gpu": "1 when the GPU has tensor cores (compute capability >= 7.0)",
    "fp32_gemm_frac": "share of step time in fp32 GEMM/conv kernels that do not use tensor cores",
    "gpu_compute_capability": "the GPU's compute capability as a number (8.0 for A100, 9.0 for H100/H200)",
    "bf16_supported": "1 when the GPU computes bf16 on tensor cores (compute capability >= 8.0)",
    "tensor_core_speedup": "the GPU's dense bf16 (fp16 before Ampere) tensor-core rate over its fp32 rate: its peaks "
                           "measured on this machine, else its datasheet (a conservative 2 for GPUs diagnose does "
                           "not know)",
    "tf32_speedup": "the GPU's dense TF32 tensor-core rate over its fp32 rate (None before Ampere)",
    "tensor_core_loss_frac": "share of step time the fp32 GEMM/conv kernels would save on tensor cores: "
                             "fp32_gemm_frac x (1 - 1 / tensor_core_speedup)",
    "autocast_used": "1 when the script entered an enabled torch.autocast region (autocast(enabled=False) is not "
                     "counted; run mode only)",
    "process_cpu_frac": "mean CPU use of the process tree (incl. DataLoader workers) as a share of all cores",
    # memory
    "peak_memory_bytes": "peak memory: CUDA max reserved on GPU runs, peak RSS of the main process otherwise",
    "memory_capacity_bytes": "device memory (GPU) or host RAM (CPU)",
    "peak_memory_frac": "peak_memory_bytes / memory_capacity_bytes",
    "empty_cache_per_step": "torch.cuda.empty_cache() calls per step",
    "peak_allocated_bytes": "peak memory held by tensors (torch.cuda.max_memory_allocated), GPU runs",
    "allocator_retries": "times the CUDA caching allocator freed its cache and retried an allocation (run mode)",
    "allocator_ooms": "out-of-memory errors the CUDA allocator raised (run mode)",
    "out_of_memory": "1 when the script ran out of memory (status out_of_memory), 0 when it did not (run mode)",
    "memory_peak_bytes": "torch's allocated bytes at the peak of a step (CUDA: the allocator's; host: live tensors "
                         "between steps plus the highest rise within a step)",
    "memory_peak_limit_frac": "that peak as a share of the limit (--memory-limit, else the device's memory)",
    "memory_activations_frac": "share of the peak held by activations saved for backward",
    "memory_optimizer_state_frac": "share of the peak held by the optimizer's state (Adam: two tensors a parameter)",
    "memory_gradients_frac": "share of the peak held by gradients",
    "memory_parameters_frac": "share of the peak held by the model's parameters",
    "memory_unattributed_frac": "share of the peak no measured part accounts for (temporaries, data, workspaces)",
    "memory_outside_torch_frac": "GPU memory used outside torch (CUDA context, NCCL, cuBLAS workspaces), as a share "
                                 "of the device's memory",
    "fragmentation_frac": "1 - peak allocated / peak reserved: memory the allocator holds but tensors do not use",
    # speed of light
    "flops_per_step": "floating-point operations per step (torch's FLOP counter in a run, else the trace's shapes)",
    "achieved_flops_s": "flops_per_step / the step time: FLOP/s the step reaches",
    "mfu": "achieved_flops_s / the device's peak in the dtype the step computes in (measured, else the datasheet's)",
    "mfu_best_dtype": "achieved_flops_s / the device's peak in its fastest training dtype (bf16, fp16, TF32, fp32)",
    "best_dtype_speedup": "the fastest training dtype's peak / the peak of the dtype the step computes in",
    "elementwise_frac": "share of the profiled step in elementwise, normalization and reduction work (memory-bound): "
                        "those kernels' time on a GPU, those ops' self time on the host outside optimizer.step()",
    "counted_ops_frac": "share of the profiled step in the ops whose FLOPs the trace's shapes give (matrix "
                        "products, convolutions, attention): their kernels on a GPU, the ops on the host",
    "below_roof_frac": "share of the profiled step in those ops running under a quarter of their roofline "
                       "(min(peak, intensity x bandwidth))",
    "below_roof_saving_frac": "share of the profiled step those ops would save at a quarter of their roof",
    "fp32_ops_frac": "share of the profiled step in those ops computing in float32 (not TF32)",
    "faster_dtype_saving_frac": "fp32_ops_frac x (1 - fp32 peak / the fastest dtype's peak): what they would save "
                                "at the fastest dtype's rate",
    # data loading
    "loader_count": "number of DataLoaders the script built",
    "loader_num_workers": "num_workers of the DataLoader that feeds training",
    "loader_multiprocess": "1 when the training DataLoader used worker processes, 0 when not (known from a trace too)",
    "loader_batch_size": "batch_size of the DataLoader that feeds training",
    "micro_batches_per_step": "micro-batches per step: a step is an optimizer step (gradient accumulation: several)",
    "loader_pin_memory": "1 when that DataLoader pins memory",
    "loader_persistent_workers": "1 when that DataLoader keeps its workers between epochs",
    "dataset_deterministic": "1 when fetching the same index twice gave equal items, 0 when not",
    "dataset_iterable": "1 when the training loader reads an IterableDataset (a stream), 0 for a map-style dataset",
    "dataset_stream_sharded": "IterableDataset: 1 when DataLoader workers get different parts of the stream, 0 when "
                              "each worker replays the whole stream (every sample fed once per worker)",
    "dataset_item_s": "seconds to fetch one item from the dataset (measured after profiling)",
    "dataset_item_cpu_frac": "share of the item fetch time spent on CPU (1 = CPU-bound, 0 = waiting on I/O or sleep)",
    # host work
    "ops_per_step": "top-level CPU torch ops per step on the main thread",
    "op_mean_us": "mean duration of a top-level CPU torch op, microseconds (small = dispatch-bound)",
    "host_top_line_frac": "share of step time in the single line of the user's own code with the most host overhead",
    "host_user_frac": "share of step time in host work of the user's own code (logging, I/O, sleeps, Python loops)",
    "optimizer_frac": "share of step time inside optimizer.step() and zero_grad() (host-run steps; on a GPU see "
                      "optimizer_host_frac)",
    "op_fixed_us": "the fixed cost of an op that does almost no work, microseconds: the cheapest tenth of the "
                   "top-level ops without nested ops (host-run steps)",
    "op_overhead_frac": "share of step time in the fixed cost of the ops outside the optimizer and data loading: "
                        "op_fixed_us for each op a top-level op runs, never more than it took (host-run steps)",
    "fixed_step_frac": "share of step time that does not grow with the batch: the optimizer's update, the host's work "
                       "outside ops and data loading, every other op's fixed cost (op_fixed_us per op it runs), a "
                       "main-process DataLoader's per-batch cost, and the profiler's own per-op cost (of the step "
                       "timed without the profiler where it was); a k times larger batch gives at most "
                       "1 / (fixed_step_frac / k + 1 - fixed_step_frac) the samples/s (host-run steps)",
    "host_framework_frac": "share of step time in torch's own Python outside ops (optimizer loops, hooks)",
    "syncs_per_step": "host-device synchronisations per step (cuda*Synchronize, .item() on GPU tensors)",
    "item_calls_per_step": "aten::item / .item() calls per step",
    "h2d_pageable_frac": "share of host-to-device copy time from pageable (unpinned) memory",
    "data_parallel_used": "1 when torch.nn.DataParallel wraps the model",
    # torch.compile
    "compiled": "1 when the steps run torch.compile'd code (a compiled region in the trace, or torch.compile called "
                "in the run), 0 when a run compiled nothing",
    "compile_dynamic": "the dynamic= torch.compile was given: 1 for True, 0 for False, None when left to torch's "
                       "default (automatic dynamic shapes) or not compiled (run mode)",
    "compile_graphs_per_step": "compiled frames entered per step, from the trace's Torch-Compiled Region spans (1 for "
                               "a forward compiled whole; each graph break adds one)",
    "compile_eager_frac": "share of step time inside compiled frames but outside their graphs: the eager code "
                          "between graphs, guards and graph calls' own wrappers",
    "compile_break_frac": "share of step time in the eager code of the frames a graph break ended (run mode)",
    "compile_graph_breaks": "places in the user's code where dynamo ended a graph (run mode)",
    "compile_recompiles": "recompilations: a compiled frame whose guard failed compiled again (run mode)",
    "compile_recompiles_after_warmup": "recompilations during the timed and profiled steps, after the warm-up "
                                       "(run mode)",
    "compile_recompile_limit_hit": "1 when a frame reached dynamo's recompile limit and from then on runs eagerly "
                                   "(run mode)",
    "compile_s": "seconds torch.compile spent compiling in the run: dynamo, AOT autograd, inductor, the backward "
                 "(run mode)",
    "compile_recompile_s": "seconds of that spent on recompilations (run mode)",
    "compile_run_frac": "compile_s as a share of the whole run the script is written for: its steps at the stated "
                        "step time plus compile_s (run mode, where the run's length is known)",
    "compile_recompile_run_frac": "compile_recompile_s as a share of that whole run",
}
