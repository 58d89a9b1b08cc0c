"""Typed, frozen records passed between pipeline stages: capture -> analysis -> rules -> report.

Units live in field names (`_s`, `_bytes`, `_frac`). Every record round-trips through JSON (see serial.py),
so each stage can be re-run from the files in the run folder.
"""
from __future__ import annotations

from enum import Enum
from typing import Optional

from diagnose.lean_dataclass import dataclass, field  # frozen records without generated code: start-up

BUCKETS = ("data_wait", "h2d", "compute", "communication", "host_overhead", "other")
CATEGORIES = ("training", "data-loading", "transfer", "utilization", "memory", "host-overhead", "communication",
              "compile")
SEVERITIES = ("high", "medium", "low")
PHASES = ("data", "forward", "backward", "optimizer", "other")
# the span the capture puts around DistributedDataParallel's search for unused parameters (after each forward)
DDP_FIND_UNUSED_SPAN = "diagnose::ddp_find_unused"



class Word(str, Enum):
    """A word the JSON files and the terminal show as itself: equal to its string, formatted as it."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Status(Word):
    """How the captured script ended (capture.json and diagnosis.json keep it as its string), the exit code
    `diagnose run` and `diagnose report` give it, and whether it is ok: its profiled steps are whole, so they
    are analysed and experimented on."""
    COMPLETED = "completed", 0, True
    SCRIPT_FINISHED = "script_finished", 0, True  # the script ended by itself before diagnose stopped it
    TIMEOUT = "timeout", 0, True  # --max-seconds ran out before diagnose stopped the script
    HUNG = "hung", 6, False  # a step never ended: --max-seconds found it waiting (where: capture.json's hang)
    SCRIPT_ERROR = "script_error", 1, False
    OUT_OF_MEMORY = "out_of_memory", 5, False  # the script's own out-of-memory error: diagnosed, not a crash
    NO_STEPS = "no_steps", 3, False
    INTERRUPTED = "interrupted", 130, False
    STOPPED = "stopped", 143, False  # SIGTERM
    # `diagnose analyze`'s traces, or a run folder whose capture.json is missing (`diagnose report` exits 1 there:
    # the run did not end well); no run to experiment on
    ANALYZED = "analyzed", 1, False
    NO_CAPTURE = "no_capture", 1, False  # the script did not start under the profiler: nothing measured
    CRASHED = "crashed", 1, False  # a timed run's process died without writing its measurement

    def __new__(cls, value: str, exit_code: int, ok: bool):
        member = str.__new__(cls, value)
        member._value_, member.exit_code, member.ok = value, exit_code, ok
        return member

    @classmethod
    def exit_code_of(cls, status: str) -> int:
        """1 for a status this version does not know (a run folder written by another)."""
        return cls(status).exit_code if status in cls._value2member_map_ else 1

    @classmethod
    def is_ok(cls, status: str) -> bool:
        return status in cls._value2member_map_ and cls(status).ok


class Verdict(Word):
    """What a timed comparison or a run under a memory limit concluded (Experiment, Headline, compare.json)."""
    FASTER = "faster"  # the 99% interval of the speedup lies above 1.0
    SLOWER = "slower"  # below 1.0
    NO_CHANGE = "no-change"  # it includes 1.0
    FAILED = "failed"  # the setting's runs crashed or measured nothing
    SKIPPED = "skipped"  # not run (budget, no loader...) or too few runs for an interval
    FLAGGED = "flagged"  # measured, but it fed other data than the baseline: never a verified speedup
    FITS = "fits"  # a memory lever on a run that ran out of memory: it fitted under the limit
    OUT_OF_MEMORY = "out-of-memory"  # it ran out of memory again
    NOT_VERIFIED = "not-verified"  # computed from what was measured, not run (no DataLoader to change)
    UNDECIDED = "undecided"  # the interval is too wide to tell a 2x gain from a 2x loss: it decides nothing


MEASURED = frozenset({Verdict.FASTER, Verdict.SLOWER, Verdict.NO_CHANGE})  # a timed comparison was made
VERIFIED = frozenset({Verdict.FASTER, Verdict.FITS})  # what a report may present as a verified change


@dataclass(frozen=True)
class Change:
    """One optimization applied with one setting, e.g. ("dataloader.num_workers", {"num_workers": 4})."""
    id: str
    setting: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MeasurePlan:
    """How a timed (unprofiled) run measures: warm up, then time windows of steps."""
    changes: tuple[Change, ...] = ()
    train_loader_location: Optional[str] = None
    framework: Optional[str] = None  # the script trains through it: changes it has a setting for are applied so
    warmup_steps: int = 5
    warmup_s: float = 1.0
    window_s: float = 1.0
    min_window_steps: int = 5
    max_window_steps: int = 40  # a window also closes here: fast variants of short scripts still get windows
    rewarm_steps: int = 1  # steps after an epoch's first that count as its start-up (new workers' first batches)
    burst_steps: int = 1  # windows hold whole bursts: with N loader workers, batches arrive N at a time
    windows: int = 3  # at most
    min_windows: int = 2  # a run stops timing once this many windows agree within agree_frac
    agree_frac: float = 0.03
    seed: int = 0
    # steps of unknown length (a run out of memory measured none): once the first step shows they take seconds,
    # fewer warm-up and window steps (experiments/cost.py long_step_plan), so the run ends in its time limit
    adapt_to_long_steps: bool = False
    # an interleaved comparison's turns (experiments/turns.py): the named pipe the parent gives them through; the
    # run times one window per turn, until the parent stops it
    turns_fifo: Optional[str] = None


@dataclass(frozen=True)
class CostInputs:
    """What the user said about the run they will launch (`--total-steps`, `--epochs`, `--price-per-hour`,
    `--price-per-kwh`): the run's length where the script does not say it, and their prices (no built-in list)."""
    total_steps: Optional[int] = None  # optimizer steps in the whole run
    epochs: Optional[float] = None  # passes over the training loader
    price_per_hour: Optional[float] = None  # what one device-hour costs the user
    price_per_kwh: Optional[float] = None


@dataclass(frozen=True)
class RunConfig:
    script: str
    script_args: tuple[str, ...]
    out_dir: str
    warmup_steps: int
    profile_steps: int
    max_seconds: float  # from the first step; from the start when startup_seconds is None (timed runs)
    experiments: str = "none"
    measure: Optional[MeasurePlan] = None  # set for experiment runs: no profiler, timed windows
    with_stack: bool = False  # torch.profiler's Python tracer (python_function events); slows Python code
    budget_seconds: float = 240.0
    launcher: tuple[str, ...] = ()  # torchrun options (--nproc-per-node 2 ...): one process per rank
    memory_limit_bytes: Optional[int] = None  # --memory-limit: run as if the device had this much memory
    # set in the child's environment before it starts: settings read once, when torch starts (an allocator's)
    environment: tuple[tuple[str, str], ...] = ()
    startup_seconds: Optional[float] = None  # the limit on the time before the first step (compiling, loading)
    cost: CostInputs = CostInputs()  # the run's length and prices, for what the run costs (diagnosis.json run_cost)


@dataclass(frozen=True)
class SteadyTiming:
    """Consecutive steady steps of a timed run, timed together in whole loader bursts (measure.json `windows`)."""
    steps: int  # consecutive steady steps: an epoch's start-up is left out (and amortised when comparing)
    seconds: float
    samples: Optional[int]
    wall_steps: Optional[int] = None  # everything from the window's start to its end, epoch starts included
    wall_seconds: Optional[float] = None
    unique_samples: Optional[int] = None  # samples not fed before in their epoch (None: not fingerprinted)
    # steps in the window's span that compiled (torch.compile: a new shape, a guard that failed; left out of its steps
    # and seconds where the window closed at a step boundary), their compile time, and how many of their compilations
    # were recompilations
    compiled_steps: int = 0
    compile_s: float = 0.0
    recompiles: int = 0
    # the window spans whole epochs, their start-ups included as the user's run pays them: epochs too short to hold
    # a window of steady steps (a few steps each), or a run that ended before one closed
    restarts_included: bool = False


@dataclass(frozen=True)
class FedRecord:
    """What a timed run fed the model: one fingerprint per sample, in order (measure.py, capture/fingerprint.py)."""
    fingerprints: tuple[int, ...] = ()
    epoch_starts: tuple[int, ...] = ()  # indices into fingerprints where the loader's epochs began
    hash_s: float = 0.0  # time the training thread spent fingerprinting
    batches: int = 0
    unhashable: int = 0  # batches with no tensor, array or column of one row per sample: not fingerprinted
    ragged: bool = False  # rows changed shape between batches (padding to the longest sample of each batch)


@dataclass(frozen=True)
class Measurement:
    """What one timed run saw (RUN/experiments/<n>/measure.json)."""
    status: str
    windows: tuple[SteadyTiming, ...]
    applied: tuple[str, ...]
    startup_s: Optional[float]  # process start to the first step
    first_step_s: Optional[float]  # includes compilation, worker start-up
    losses: tuple[float, ...]
    peak_memory_bytes: Optional[int]
    steps_seen: int
    error: Optional["ScriptError"] = None
    restart_steps_s: tuple[float, ...] = ()  # durations of the epoch start-ups after the first (rewarm_steps each)
    rewarm_steps: int = 1  # steps in each epoch start-up: the one that made the iterator, then the refill
    steps_per_epoch: Optional[int] = None  # len() of the training loader, when it has one
    fed: FedRecord = FedRecord()
    # the energy counters over the timed span (the first window's start to the last one's end, epoch starts
    # included), per domain; empty where none was read
    energy: tuple["EnergyReading", ...] = ()
    compile_s: Optional[float] = None  # time torch.compile spent compiling in this run (None: nothing compiled)


@dataclass(frozen=True)
class FrameworkSite:
    """A training framework (Hugging Face Trainer, Lightning) the script runs under: the user's line that
    configures it (TrainingArguments(...), Trainer(...)) and the line that hands control to it (.train(), .fit())."""
    name: str  # huggingface | lightning
    location: Optional[str]  # "file:line" of the configuring call, None when it was made outside the user's code
    entry: Optional[str] = None  # "file:line" of the call into the framework's training loop
    settings: dict[str, str] = field(default_factory=dict)  # values of the framework's watched settings, as text


@dataclass(frozen=True)
class LoaderInfo:
    location: Optional[str]  # "file:line" in the user's code
    batch_size: Optional[int]
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: Optional[int]
    dataset_type: str
    dataset_len: Optional[int]
    batches_drawn: int = 0
    wait_s: float = 0.0  # time spent in next() on this loader during the profiled window
    framework: Optional[str] = None  # built inside this framework: `location` is the line that configures it
    dataset_kind: str = "map"  # map | iterable (an IterableDataset: a stream, no len, no index)


@dataclass(frozen=True)
class OptimizerInfo:
    location: Optional[str]
    type: str
    lr: Optional[float]
    foreach: Optional[bool]
    fused: Optional[bool]
    framework: Optional[str] = None  # built inside this framework: `location` is the line that configures it


@dataclass(frozen=True)
class DdpInfo:
    """A DistributedDataParallel wrapper the script built: its settings as constructed, the process group's backend
    and size, and what its backward passes did in the steps seen (gradient accumulation with or without no_sync())."""
    location: Optional[str]  # "file:line" of the DistributedDataParallel(...) call in the user's code
    find_unused_parameters: bool
    static_graph: bool
    gradient_as_bucket_view: bool
    bucket_cap_mb: float  # as built (torch's default: 25)
    broadcast_buffers: bool
    backend: Optional[str]  # gloo | nccl | ... (None: no default process group could be read)
    world_size: Optional[int]
    parameters: int = 0  # tensors that require a gradient
    gradient_bytes: int = 0  # their size: what one all-reduce of every gradient moves
    backward_location: Optional[str] = None  # "file:line" of the user's backward() call (the accumulation loop)
    # over the optimizer steps after the first: backward() calls per step, and how many of them all-reduced (their
    # forward ran outside no_sync()); the most common pair
    backwards_per_step: Optional[int] = None
    synced_backwards_per_step: Optional[int] = None
    # the most parameters (of those that require a gradient) that got none in one backward (None: not counted)
    unused_parameters: Optional[int] = None
    backwards_seen: int = 0


@dataclass(frozen=True)
class FsdpInfo:
    """FSDP2's fully_shard() calls the script made: where the first was, and each unit's settings in call order (the
    root, called last, last)."""
    location: Optional[str]  # "file:line" of the first fully_shard(...) call in the user's code
    units: int  # fully_shard() calls: the modules sharded as a unit
    reshard_after_forward: tuple[str, ...]  # each unit's, as given: "True", "False", "None" (torch's default), an int
    param_dtype: Optional[str] = None  # the mixed-precision policy's (None: the parameters' own)
    reduce_dtype: Optional[str] = None
    offload: bool = False  # parameters offloaded to the CPU (CPUOffloadPolicy)
    backend: Optional[str] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class ModelInfo:
    type: str
    location: Optional[str]
    device: str
    dtype: str
    parameters: int
    conv_layers: int = 0
    input_batch: Optional[int] = None  # the first forward's first input's leading dimension: the batch it got


@dataclass(frozen=True)
class DatasetProbe:
    """Measured after the profiled window: is fetching an item deterministic, and how costly is it."""
    deterministic: Optional[bool]
    item_s: Optional[float]
    item_cpu_frac: Optional[float]
    reason: str = ""
    item_bytes: Optional[int] = None  # tensor bytes in one item
    # IterableDataset: does each DataLoader worker get its own part of the stream? None: could not tell
    stream_sharded: Optional[bool] = None
    stream_note: str = ""  # how that was found, or why it could not be


@dataclass(frozen=True)
class Environment:
    python: str
    torch: str
    platform: str
    cpu_count: int
    total_memory_bytes: int
    cuda_available: bool
    gpu_name: Optional[str] = None
    gpu_memory_bytes: Optional[int] = None
    gpu_capability: Optional[str] = None
    nvml: str = "unavailable"


@dataclass(frozen=True)
class ScriptError:
    type: str
    message: str
    traceback: str
    step: Optional[int]
    # the exit codes of the DataLoader workers the error came through (negative: the signal that killed one)
    worker_exit_codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class WorkerFailure:
    """A DataLoader worker that died (capture.json `worker_failure`): how, and what says why."""
    signal: str  # Killed | Bus error | Segmentation fault | Aborted | "" (an exit code, or not known)
    exit_code: Optional[int]
    step: Optional[int]
    cause: str  # memory | killed (with memory to spare) | shared-memory | native-crash | unknown
    why: str
    fix: str
    workers: int
    prefetch_factor: int
    batch_bytes: Optional[int]  # one batch's tensors, measured on the first
    in_flight_bytes: Optional[int]  # batch_bytes x workers x prefetch_factor: what /dev/shm holds at most
    shm_bytes: Optional[int]  # /dev/shm's size, and what was free, when it happened
    shm_free_bytes: Optional[int]
    available_memory_bytes: Optional[int]  # the machine's available memory just before it happened (sampled)
    worker_rss_bytes: Optional[int] = None  # the dead worker's resident memory at its last sample
    workers_rss_bytes: Optional[int] = None  # all the workers' (the main process's children) at that sample
    seconds_before: Optional[float] = None  # how long before the error that sample was taken
    oom_kills: Optional[int] = None  # the cgroup's OOM kills during the run (None: no cgroup count to read)
    cgroup_limit_bytes: Optional[int] = None  # the cgroup's tightest memory limit (None: none set)


@dataclass(frozen=True)
class LimitCandidate:
    """One memory limit that applies to the script: where it comes from, and its size."""
    source: str  # "--memory-limit", "RLIMIT_AS, ulimit -v", "cgroup memory.max (/sys/fs/cgroup/...)", ...
    limit_bytes: int
    kind: str  # flag | rlimit | cgroup | machine | gpu (capture/limits.py)


@dataclass(frozen=True)
class MemoryLimitReading:
    """The limit that applies (the one that leaves the least room), and every one read (capture.json
    `memory_limit`): the report names it instead of the machine's memory when a ulimit or a cgroup is lower."""
    limit_bytes: int
    source: str
    kind: str
    candidates: tuple[LimitCandidate, ...] = ()


@dataclass(frozen=True)
class OutOfMemory:
    """Where and how the script ran out of memory (capture.json and diagnosis.json `out_of_memory`)."""
    step: Optional[int]  # the step that failed (0-based), None before the first
    phase: str  # one of PHASES: data | forward | backward | optimizer | other (between steps)
    requested_bytes: Optional[int]  # the allocation that failed, as the allocator said
    in_use_bytes: Optional[int]  # allocated by torch (CUDA) or grown address space / resident memory (host)
    limit_bytes: Optional[int]  # --memory-limit, else the device's or the machine's memory
    limit_source: str
    device: str  # cuda | cpu
    # what counted against the limit when the script started (the interpreter, torch: no sample of the batch)
    start_bytes: Optional[int] = None


@dataclass(frozen=True)
class MemorySizes:
    """Measured over the first training step (capture.json `memory_sizes`): what the breakdown at the peak is made
    of (capture/memory.py StepMemory)."""
    device: str  # cuda | cpu: where the model's parameters are
    parameters_bytes: int
    gradients_bytes: int  # .grad of the parameters at the step's end
    optimizer_state_bytes: int  # tensors in the optimizers' state (Adam: two per parameter)
    activations_bytes: int  # saved for backward in that step: unique storages, parameters left out
    buffers_bytes: int  # the model's buffers (batch-norm statistics...)
    live_between_steps_bytes: Optional[int]  # every tensor on the device at the second step boundary
    allocator_peak_bytes: Optional[int] = None  # CUDA: the caching allocator's peak in that step


@dataclass(frozen=True)
class PlainTiming:
    """Steps timed before the profiled window, the profiler never started: the step time the user's script runs at.
    The device is synchronised at the window's two edges only (never per step), so queued GPU work counts."""
    steps: int
    seconds: float
    device_synced: bool  # False on CPU-only runs, where there is no device queue to drain
    # seconds from the window's start to the end of each step (host clock): the window cut into blocks of whole
    # bursts says how much its step time moves within one run (compare's run-to-run spread)
    step_ends_s: tuple[float, ...] = ()
    burst: int = 1  # loader workers deliver this many batches at a time: blocks hold whole bursts

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps


@dataclass(frozen=True)
class Hang:
    """A step that never ended: where the main thread waited when the deadline came (capture.json `hang`)."""
    step: int  # the step (from 0) that was open
    open_s: float  # how long it had been open
    typical_step_s: Optional[float]  # the steps before it (None: none had ended)
    location: Optional[str]  # the innermost line of the user's code on the main thread's stack
    function: str
    code: str
    waiting_on: str  # a lock, a queue, a collective, a DataLoader worker's batch, a sleep, I/O...
    stack: tuple[str, ...] = ()  # the main thread's frames, outermost first: "file:line in function: code"
    threads: tuple[str, ...] = ()  # each other thread's innermost frame
    native_wait: bool = False  # the main thread waited in native code: the run was ended without it (no trace)
    workers: tuple[str, ...] = ()  # each DataLoader worker process: where it was, or that it had exited
    ranks: tuple[str, ...] = ()  # under torchrun, each other rank: where it waited, or how it had ended

    def place(self) -> str:
        """'at train.py:16 in read_next_shard (time.sleep(3600))', or '' when no line of the user's was on the
        stack."""
        return f"at {self.location} in {self.function} ({without_comment(self.code)})" if self.location else ""


def without_comment(code: str) -> str:
    """A source line without its trailing comment."""
    return code.split("  #")[0].strip()


@dataclass(frozen=True)
class LossCheck:
    """The losses passed to backward() in the diagnosed run, read back once at its end (no sync per step): whether
    training was training. A NaN or inf loss makes every speed figure a figure of a run that learns nothing."""
    checked: int  # losses read (every step's, warm-up included, up to a cap)
    first_nonfinite_step: Optional[int] = None  # the step (from 0) whose loss was first NaN or inf
    nonfinite_value: str = ""  # nan | inf | -inf
    last_finite: Optional[float] = None  # the last finite loss before it
    nonfinite_count: int = 0


@dataclass(frozen=True)
class Startup:
    """The time from the script's start to its first step, split by what the main thread was doing (sampled):
    compiling, loading weights, preparing data, importing, distributed start-up, your code, the first step."""
    seconds: float
    by_activity: dict[str, float]  # activity -> seconds, largest first
    places: dict[str, str]  # activity -> where most of it was: a package, or the user's file:line
    last_activity: str = ""  # what it was doing last (when no step came: what it was doing when stopped)
    last_place: str = ""
    reached_step: bool = True
    stopped_at_limit: bool = False  # --startup-seconds ended it before its first step


@dataclass(frozen=True)
class RunLength:
    """How long the run the script is written for is, as read from it while it ran (capture/run_length.py) or as
    the user said: optimizer steps in all, and where that was read ("the loop at train.py:40, range(args.epochs)")."""
    total_steps: Optional[float]  # None: not known (the note says why)
    source: str = ""
    steps_per_epoch: Optional[float] = None  # len(training loader) / micro-batches per step
    epochs: Optional[float] = None
    note: str = ""  # why it could not be read


@dataclass(frozen=True)
class EnergyReading:
    """Energy used over the timed (unprofiled) window by one kind of device of this process (capture/energy.py):
    `gpu` (NVML's total-energy counter read at the window's edges, else its power samples integrated) or `host`
    (RAPL's package counters). joules None: unavailable, and the note says why; never estimated otherwise."""
    domain: str  # gpu | host
    joules: Optional[float]
    seconds: float  # the window the joules cover
    steps: int
    source: str  # nvml-energy-counter | nvml-power-samples | rapl | unavailable
    devices: int = 0  # devices (GPUs, CPU packages) summed
    note: str = ""
    samples: Optional[int] = None  # samples fed over the same steps, where counted (experiments' timed runs)


@dataclass(frozen=True)
class CompileEvent:
    """One compilation dynamo made while the script ran, from torch._dynamo's own CompilationMetrics
    (capture/dynamo.py). Times in seconds; None where this torch does not record them."""
    compile_id: str  # frame/attempt, as the trace's "Torch-Compiled Region: 0/1" names it
    frame: str  # the function compiled (a resume function after a graph break: torch_dynamo_resume_in_...)
    location: Optional[str]  # the user's file:line where that function starts
    step: int  # the step (from 0, warm-up included) during which it compiled
    seconds: float  # the forward's compile and its backward's, together
    dynamo_s: Optional[float] = None  # tracing the bytecode
    aot_autograd_s: Optional[float] = None
    inductor_s: Optional[float] = None
    codegen_s: Optional[float] = None  # inductor's code generation (part of inductor_s)
    autotune_s: Optional[float] = None
    backward_s: Optional[float] = None  # the backward graph, compiled at the first backward() through it
    cache_hits: int = 0  # FX graph and AOTAutograd cache hits (local and remote) of this compilation
    cache_misses: int = 0
    recompile_reason: str = ""  # the guard that failed, for a recompilation; "" for a frame's first compile
    failed: str = ""  # why dynamo gave up on the frame (the recompile limit: the frame runs eagerly)

    @property
    def is_recompile(self) -> bool:
        """A frame compiled again after a guard failed (not the attempt dynamo gave up at the limit)."""
        return bool(self.recompile_reason) and not self.failed


@dataclass(frozen=True)
class GraphBreak:
    """A place in the user's code where dynamo ended a graph (torch._dynamo's GraphCompileReason)."""
    location: Optional[str]  # file:line of the break, in the user's code
    function: str  # the function the break is in
    reason: str  # dynamo's reason, its first line ("Unsupported Tensor.item() call ...")
    code: str = ""  # the graph-break registry's code (GB0124), where torch gives one
    hint: str = ""  # torch's first hint
    frame_ids: tuple[int, ...] = ()  # dynamo frames whose graph it ended: the trace's "Torch-Compiled Region: F/..."
    compiles: int = 1  # compilations that met it


@dataclass(frozen=True)
class Compilation:
    """What torch.compile did in the run, read while it ran (capture/dynamo.py)."""
    torch_version: str
    call_location: Optional[str] = None  # the user's torch.compile(...) or module.compile() line
    dynamic: Optional[bool] = None  # the dynamic= it was given (None: torch's default, automatic)
    mode: Optional[str] = None
    backend: str = "inductor"
    events: tuple[CompileEvent, ...] = ()
    graph_breaks: tuple[GraphBreak, ...] = ()
    recompile_limit: Optional[int] = None  # torch._dynamo.config.recompile_limit when the run ended
    # frames (function at file:line) that reached the recompile limit and from then on run eagerly
    eager_after_limit: tuple[str, ...] = ()
    # where the compile cache lived: "private" (a fresh folder of this run: the capture compiles cold, the timed
    # runs after it warm), "user" (the user's own TORCHINDUCTOR_CACHE_DIR, in whatever state it was)
    cache: str = "private"

    @property
    def seconds(self) -> float:
        """All the time dynamo spent compiling, forwards and backwards."""
        return sum(e.seconds for e in self.events)

    @property
    def recompiles(self) -> tuple[CompileEvent, ...]:
        return tuple(e for e in self.events if e.is_recompile)

    def compiling_steps(self) -> set[int]:
        return compiling_steps(self.events)


def compiling_steps(events) -> set[int]:
    """The steps (from 0) in which torch.compile compiled: not steps of the run's steady state."""
    return {e.step for e in events if e.seconds > 0}


@dataclass(frozen=True)
class Capture:
    """What the child process saw while running the user's script (RUN/capture.json)."""
    status: str  # a Status's value
    script: str
    script_args: tuple[str, ...]
    step_source: Optional[str]  # dataloader | backward | optimizer | manual
    steps_seen: int
    steps_profiled: int
    warmup_steps: int
    wall_s: float
    environment: Environment
    boundaries_s: tuple[float, ...] = ()  # step starts, seconds since the capture started
    last_step_complete: bool = True
    loaders: tuple[LoaderInfo, ...] = ()
    train_loader: Optional[int] = None  # index into loaders of the one that drives steps
    wait_loader: Optional[int] = None  # the loader training waited on most in the profiled window
    optimizers: tuple[OptimizerInfo, ...] = ()
    model: Optional[ModelInfo] = None
    dataset_probe: Optional[DatasetProbe] = None
    trace_files: tuple[str, ...] = ()  # relative to the run folder
    counters: dict[str, int] = field(default_factory=dict)  # empty_cache calls, DataParallel, autocast...
    peak_memory_bytes: Optional[int] = None  # device memory (CUDA max reserved) or host RSS on CPU
    memory_capacity_bytes: Optional[int] = None
    memory_kind: str = "host"
    allocator: dict[str, int] = field(default_factory=dict)  # CUDA caching allocator counters (GPU runs only)
    error: Optional[ScriptError] = None
    notes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()  # ranks that wrote a capture, in a multi-process run
    redirected_writes: dict[str, str] = field(default_factory=dict)  # user path -> what the script left, in RUN/sandbox
    restored_files: tuple[str, ...] = ()  # the user's files and folders put back after the script changed or removed
    unrestored_files: tuple[str, ...] = ()  # changed by another process during the run, no copy from before: as left
    unprofiled_window: Optional[PlainTiming] = None  # None: not measured (script ended first, old capture)
    autocast_dtypes: tuple[str, ...] = ()  # dtypes of the enabled autocast regions the script entered
    framework: Optional[FrameworkSite] = None  # the training framework the script runs under, if any
    out_of_memory: Optional[OutOfMemory] = None  # status out_of_memory: where and how
    memory_limit_bytes: Optional[int] = None  # the --memory-limit it ran under
    memory_limit: Optional[MemoryLimitReading] = None  # the limit that applied, as read when the script started
    memory_sizes: Optional[MemorySizes] = None  # measured over the first training step
    # the highest of what counts against --memory-limit (CUDA: reserved; host: address space grown, else resident)
    memory_limit_peak_bytes: Optional[int] = None
    flops: Optional["FlopCount"] = None  # one warm-up step's FLOPs, by torch's counter
    flops_note: str = ""  # why they were not counted, when they were not
    tf32_matmuls: bool = False  # float32 matrix products allowed to run as TF32 (on a GPU with TF32 units)
    # a step is an optimizer step: the micro-batches (data loader batches, else backward() calls) in one, as most
    # of the steps after the warm-up had; 1 without gradient accumulation or an optimizer
    micro_batches_per_step: int = 1
    fit_note: str = ""  # long steps: the fewer warm-up and profiled steps that fit --max-seconds, and why
    # the script finished before any step was profiled: the --steps that --warmup 1 leaves room for in as many
    # steps as it ran (`run` runs it again so; 0: too few steps for any)
    fitted_steps: int = 0
    startup: Optional[Startup] = None  # before the first step (the profiled capture only)
    startup_limit_s: Optional[float] = None  # --startup-seconds; None: --max-seconds counted from the start
    loss: Optional[LossCheck] = None  # the losses passed to backward(): finite or not (None: none seen)
    hang: Optional[Hang] = None  # status hung: where the step that never ended waited
    worker_failure: Optional[WorkerFailure] = None  # the script's error was a DataLoader worker's death
    run_length: Optional[RunLength] = None  # the run the script is written for, as its loops and trainer say
    energy: tuple[EnergyReading, ...] = ()  # over the timed window, per domain (gpu, host); summed over ranks
    # what `python train.py` pays before its first line: the interpreter's start and torch's import (diagnose's own
    # imports and set-up left out); then the script's first line to its first step
    process_start_s: Optional[float] = None
    script_to_first_step_s: Optional[float] = None
    compilation: Optional[Compilation] = None  # torch.compile ran: its compilations, graph breaks, recompiles
    ddp: Optional[DdpInfo] = None  # the script wrapped its model in DistributedDataParallel (the first wrapper)
    fsdp: Optional[FsdpInfo] = None  # the script sharded its model with FSDP2's fully_shard()


@dataclass(frozen=True)
class Samples:
    """System samples in columns (RUN/samples.json); t_s is seconds since the capture started."""
    t_s: tuple[float, ...] = ()
    cpu_frac: tuple[float, ...] = ()  # whole-machine CPU use, 0..1
    per_core_frac: tuple[tuple[float, ...], ...] = ()
    process_cpu_frac: tuple[float, ...] = ()  # process tree incl. DataLoader workers, in cores/cpu_count
    rss_bytes: tuple[int, ...] = ()  # process tree incl. workers
    gpu_util_frac: tuple[Optional[float], ...] = ()
    gpu_mem_used_bytes: tuple[Optional[int], ...] = ()
    gpu_mem_total_bytes: Optional[int] = None
    pcie_rx_bytes_s: tuple[Optional[float], ...] = ()
    pcie_tx_bytes_s: tuple[Optional[float], ...] = ()
    power_w: tuple[Optional[float], ...] = ()
    sm_clock_mhz: tuple[Optional[float], ...] = ()
    gpu: str = "unavailable"
    window_s: tuple[float, float] | None = None  # profiled window, same clock as t_s


@dataclass(frozen=True)
class StackSamples:
    """Main-thread stack samples during the profiled window: (monotonic ns, user file:line)."""
    t_ns: tuple[int, ...] = ()
    location: tuple[Optional[str], ...] = ()
    in_torch: tuple[bool, ...] = ()  # innermost frame in torch's machinery (or diagnose): framework overhead
    sync_mark_ns: Optional[int] = None  # monotonic ns taken inside the `diagnose::clock_sync` trace event


@dataclass(frozen=True)
class StepBreakdown:
    index: int
    start_s: float  # seconds since the first profiled step began
    duration_s: float
    buckets_s: dict[str, float]


@dataclass(frozen=True)
class OpStat:
    name: str
    calls: int
    total_s: float
    self_s: float


@dataclass(frozen=True)
class SourceLine:
    location: str
    seconds_per_step: float
    frac: float
    code: str = ""
    in_torch: bool = False  # time in torch's own Python (optimizer loops, hooks) called from this line


@dataclass(frozen=True)
class SyncSource:
    """Where blocking host-device syncs come from: the runtime call, the torch op around it, the user's line."""
    call: str  # cudaStreamSynchronize, cudaMemcpy...
    op: str  # outermost torch op around it (aten::item, aten::to...), "" when none
    location: str  # path:line of the user's code when the trace has Python frames, else ""
    per_step: float


@dataclass(frozen=True)
class PhaseStat:
    """One phase of the step on a GPU: how many launches the host makes in it, the device work they become."""
    phase: str  # one of PHASES
    launches_per_step: float  # runtime calls that put work on the device (kernels, copies, memsets)
    kernels_per_step: float  # device events (kernels, copies, memsets) those calls became
    gpu_busy_s_per_step: float  # time the device ran them, inside the steps


@dataclass(frozen=True)
class RankSummary:
    """One rank of a multi-process job (one trace per rank)."""
    rank: int
    trace: str
    step_time_s: float
    breakdown: dict[str, float]
    collective_wait_frac: Optional[float]  # share of step time in collectives (waiting for the other ranks)
    gpu_busy_frac: Optional[float] = None
    data_wait_frac: Optional[float] = None
    communication_frac: Optional[float] = None  # exposed: collectives not hidden behind compute
    allreduces_per_step: Optional[float] = None  # all-reduce calls per optimizer step
    step_times_s: tuple[float, ...] = ()  # each profiled step's time on this rank


@dataclass(frozen=True)
class MemoryPart:
    name: str  # parameters | gradients | optimizer state | activations | buffers | other
    bytes: int
    note: str = ""


@dataclass(frozen=True)
class MemoryBreakdown:
    """What the memory at the peak of a step is made of, and when in the step it peaks (diagnosis.json `memory`).
    The parts add up to `peak_bytes`; what nothing accounts for is the part named `other`, never left out."""
    device: str  # cuda | cpu
    peak_bytes: Optional[int]  # torch's allocated bytes at the peak; None when it could not be measured
    peak_basis: str  # how the peak was measured, in words
    peak_phase: Optional[str] = None  # one of PHASES: where in the step the peak falls
    parts: tuple[MemoryPart, ...] = ()
    limit_bytes: Optional[int] = None  # --memory-limit, else the device's (or the machine's) memory
    limit_source: str = ""
    reserved_bytes: Optional[int] = None  # CUDA: held by the caching allocator at the peak (allocated or not)
    outside_torch_bytes: Optional[int] = None  # CUDA: NVML's used memory beyond what torch reserved (context, NCCL)
    # one step's allocated total over time (seconds from its start), with each point's phase; at most a few
    # hundred points (each the highest of its stretch)
    timeline_s: tuple[float, ...] = ()
    timeline_bytes: tuple[int, ...] = ()
    timeline_phase: tuple[str, ...] = ()
    estimate: bool = False  # an out-of-memory run: sizes as far as it got, the peak estimated from them


@dataclass(frozen=True)
class FlopCount:
    """A step's floating-point operations: from torch's FLOP counter over one warm-up step of the run, or from
    the shapes a trace recorded (diagnosis.json `speed_of_light.flops`)."""
    per_step: float
    by_phase: dict[str, float]  # forward | backward | optimizer | data | other
    by_dtype: dict[str, float]  # float32 | bfloat16 | float16 | ...: the dtype of the op's first input
    source: str
    uncounted: tuple[str, ...] = ()  # ops that do arithmetic the count could not read: "name xN" per step
    # the innermost modules with the most FLOPs (forward and backward), by their names in the model; a run only
    by_module: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Peak:
    """What the device can do per second in one dtype (or bytes per second, dtype "memory")."""
    device: str
    dtype: str
    per_s: float
    source: str  # "measured: ..." or "datasheet: <url>"


@dataclass(frozen=True)
class MachinePeaks:
    """RUN/peaks.json: the peaks measured on the machine the run ran on (cached per machine)."""
    device: str  # cuda | cpu
    peaks: tuple[Peak, ...] = ()


@dataclass(frozen=True)
class RooflineOp:
    """One kind of op (name, input shapes, dtype) on the roofline: per call, its FLOPs, the bytes it must move
    (each input read once, each output written once), the time it took, and where that lies under its roof."""
    name: str
    shapes: str  # "[8192, 1024] x [1024, 4096]"
    dtype: str
    calls_per_step: float
    flops: float
    bytes: float
    seconds: float  # per call: its kernels' time on a GPU, the op's own time on the host
    intensity: float  # FLOPs per byte
    achieved_flops_s: float
    roof_flops_s: float  # min(the dtype's peak, intensity x memory bandwidth)
    bound: str  # compute | memory: which side of the machine's balance its intensity lies
    roof_frac: float  # achieved / roof
    step_frac: float  # of the step time (profiled mean): calls x seconds


@dataclass(frozen=True)
class Roofline:
    """The ops that do a step's arithmetic against the machine's roof (diagnosis.json `speed_of_light.roofline`):
    the top ones by time; the totals cover all of them."""
    bandwidth: Peak  # the memory roof
    roofs: tuple[Peak, ...]  # the compute roofs: the peak of each dtype the ops computed in
    balance: float  # FLOPs per byte where the main dtype's peak meets the memory roof
    timing: str  # "device kernels" | "host op time"
    ops: tuple[RooflineOp, ...]
    counted_frac: float  # of the step time in the counted ops (all of them, not only the top)
    below_roof_frac: float  # of the step time in counted ops reaching under a quarter of their roof
    below_roof_bound: str  # compute | memory | mixed: which kind that time is
    below_roof_saving_frac: float  # of the step time those ops would save at a quarter of their roof
    dtype_frac: dict[str, float]  # of the step time in counted ops, by the dtype they computed in


@dataclass(frozen=True)
class SpeedOfLight:
    """How far a step is from what the device can do (diagnosis.json `speed_of_light`): achieved FLOP/s against
    the peak of the dtype the step computes in, and against the best dtype the device offers."""
    flops: FlopCount
    step_s: float  # the step time the FLOPs are divided by (unprofiled when measured)
    achieved_flops_s: float
    dtype: str  # the dtype with most of the step's FLOPs
    peak: Optional[Peak] = None  # in that dtype
    mfu: Optional[float] = None  # achieved / peak
    best: Optional[Peak] = None  # the fastest dtype this device offers
    mfu_best: Optional[float] = None
    light_step_s: Optional[float] = None  # the step's FLOPs at the best peak: the speed-of-light step time
    cross_check: Optional[FlopCount] = None  # the trace's count beside torch's counter, in a run
    peaks: tuple[Peak, ...] = ()  # every peak known for this device (measured and datasheet)
    # the gap to the speed of light, split: the share of the step the device computed (GPU kernels running; on
    # the host, torch ops), the rest it waited (data, host work, syncs); and MFU while it computed
    busy_frac: Optional[float] = None
    mfu_while_busy: Optional[float] = None
    roofline: Optional[Roofline] = None  # from a trace with shapes, where the memory roof is known


@dataclass(frozen=True)
class CompiledFrame:
    """One dynamo frame's compiled code in the profiled steps (analysis/compiled.py): the trace's
    "Torch-Compiled Region: F/C" spans of frame F."""
    frame_id: int
    entries_per_step: float
    eager_s_per_step: float  # inside the frame but outside its graphs and the frames it resumes into


@dataclass(frozen=True)
class BreakSite:
    """A graph break with what it costs in the profiled steps (where the trace tells its frames apart)."""
    location: Optional[str]
    function: str
    reason: str
    code: str = ""
    hint: str = ""
    per_step: Optional[float] = None  # times the break is met per step (entries into the frame it ends)
    eager_s_per_step: Optional[float] = None  # eager code it leaves between graphs, per profiled step
    recompiles: int = 0  # recompilations of the frames it resumes into (a guard on the value read back)
    cost_frac: Optional[float] = None  # its part of compile_break_frac, by the eager time of the frames it ended


@dataclass(frozen=True)
class RecompileSite:
    """Recompilations of one compiled function, with the guard that failed."""
    frame: str
    location: Optional[str]
    count: int
    seconds: float  # compile time of the recompilations
    guard: str  # the first failed guard, as dynamo states it ("tensor 'x' size mismatch at index 1 ...")
    variable: Optional[str] = None  # what the guard checks ('x', or the value a graph break read back)
    dimension: Optional[int] = None  # the size that changed, for a shape guard
    eager_after_limit: bool = False  # reached the recompile limit: runs eagerly from then on
    steps: tuple[int, ...] = ()  # the steps they happened in (from 0, warm-up included)


@dataclass(frozen=True)
class CompiledSteps:
    """Compiled code in the profiled steps (from the trace) and what dynamo did in the run (from the capture)."""
    graphs_per_step: float  # compiled frames entered per step (1 for a forward compiled whole)
    eager_frac: float  # share of step time in compiled frames outside their graphs: eager code between graphs
    frames: tuple[CompiledFrame, ...] = ()
    breaks: tuple[BreakSite, ...] = ()  # costliest first
    recompiles: tuple[RecompileSite, ...] = ()  # most first


@dataclass(frozen=True)
class Analysis:
    steps: tuple[StepBreakdown, ...]
    step_time_s: dict[str, Optional[float]]  # mean, p50, p95 (profiled); unprofiled (None when not measured)
    breakdown: dict[str, float]  # bucket -> fraction of the mean step; sums to 1
    top_ops: tuple[OpStat, ...]
    host_lines: tuple[SourceLine, ...]
    metrics: dict[str, Optional[float]]
    locations: dict[str, Optional[str]]
    step_definition: str
    notes: tuple[str, ...] = ()
    syncs: tuple[SyncSource, ...] = ()
    ranks: tuple[RankSummary, ...] = ()  # every rank's figures when several traces were analysed together
    phases: tuple[PhaseStat, ...] = ()  # GPU runs: launches and device time per phase of the step
    framework: Optional[FrameworkSite] = None  # findings speak in its settings' words
    memory: Optional[MemoryBreakdown] = None  # the peak of a step, what it is made of, where it falls
    speed_of_light: Optional[SpeedOfLight] = None  # FLOPs per step against the device's peak
    compiled: Optional[CompiledSteps] = None  # torch.compile'd code in the steps (None: none in the trace)


@dataclass(frozen=True)
class Finding:
    rule: str
    category: str
    severity: str
    cost_fraction: float
    title: str
    message: str
    location: Optional[str]
    fix: str
    fix_code: str
    optimizations: tuple[str, ...]
    docs: str = ""
    # what the fix gives if it removes the cost: 1 / (1 - cost_fraction), the step at most that much faster (None for
    # a finding whose cost only ranks it: a memory risk, a cost no measurement gives); cost_basis: what bounded it
    predicted_speedup: Optional[float] = None
    cost_basis: str = ""
    share_of: str = "step"  # what cost_fraction is a share of: the step's time, or the whole run's (compile time)
    # predicted_speedup is what the fix gives at most (upper), or at least (lower: the cost counts only part of
    # what the fix removes, as a graph break's machinery without the fusion it loses)
    prediction_bound: str = "upper"


@dataclass(frozen=True)
class PredictionCheck:
    """A finding's predicted speedup beside what its best experiment measured (diagnosis.json `predictions`)."""
    rule: str
    predicted_speedup: float  # the finding's bound, at the change the experiment made where that is known
    experiment: str  # optimization(setting) that measured it; "" when none of the finding's fixes reached a verdict
    measured_speedup: Optional[float] = None
    measured_ci: Optional[tuple[float, float]] = None
    # agrees | over-predicted | under-predicted (the measurement's whole interval more than 2x off) | unmeasured |
    # undecided (its fixes' only measurements were undecided: nothing checked, the experiment named beside)
    verdict: str = "unmeasured"
    ratio: Optional[float] = None  # predicted / measured
    basis: str = ""  # what the prediction at that change rests on, where it is not the finding's own cost
    undecided_cause: str = ""  # an undecided one: the experiment's undecided_cause


@dataclass(frozen=True)
class Experiment:
    """One setting tried: its measured effect against the baseline (diagnosis.json `experiments`)."""
    optimization: str  # an optimization id, "combined" or "ceiling"
    setting: dict
    metric: str  # steps/s | samples/s
    speedup: Optional[float]
    ci: Optional[tuple[float, float]]
    # faster | slower | no-change | undecided (the interval cannot tell a 2x gain from a 2x loss) | failed | skipped |
    # flagged; out-of-memory runs: fits | out-of-memory
    verdict: str
    loss_drift: Optional[float]
    peak_memory_bytes: Optional[int]
    reason: str
    fidelity: str = ""  # identical | approximate | changes-dynamics
    runs: int = 0
    applied: tuple[str, ...] = ()
    first_step_s: Optional[float] = None  # process start to the first step: start-up, workers, compilation
    baseline_first_step_s: Optional[float] = None
    change: str = ""  # unified diff against the user's script, or a snippet
    baseline_peak_memory_bytes: Optional[int] = None  # to report memory saved (checkpointing, accumulation)
    fidelity_warning: str = ""
    # what the variant fed against the baseline (experiments/same_data.py): same-sequence | same-samples |
    # different | unchecked, and in words
    data_check: str = ""
    data_check_detail: str = ""
    fingerprint_step_s: Optional[float] = None  # training-thread time per step spent fingerprinting the batch
    # a run that ran out of memory has no baseline to compare with: each variant's own throughput (geometric
    # mean over its runs, in `metric`) with its 99% interval, and its verdict fits | out-of-memory
    throughput: Optional[float] = None
    throughput_ci: Optional[tuple[float, float]] = None
    limit_bytes: Optional[int] = None  # the memory limit the variant ran under (out-of-memory runs)
    # MFU against the device's fastest training dtype (a reference every change keeps, mixed precision included):
    # the baseline's runs, and the variant's (the baseline's x the speedup: the same FLOPs per sample)
    mfu_before: Optional[float] = None
    mfu_after: Optional[float] = None
    # energy per unit of work (a step, or a sample for samples/s), the variant's over the baseline's: geometric means
    # of their timed runs' counters; None where the runs read no counter
    energy_ratio: Optional[float] = None
    # time torch.compile spent compiling in a timed run (median over its runs), the variant's and the baseline's:
    # a change to how the model compiles pays or saves it once per run, apart from the steady speedup
    compile_s: Optional[float] = None
    baseline_compile_s: Optional[float] = None
    changes: tuple[Change, ...] = ()  # what the variant applied: optimization ids and settings (riders included)
    patch: str = ""  # the change as an edit of the user's files: its patch in the run folder ("" when none)
    # an undecided verdict: what the timed windows show that could have widened the interval: recompiles |
    # compiling (torch.compile compiled inside them) | epoch-restarts | noisy-machine (their own spread); "" otherwise
    undecided_cause: str = ""
    # what the timed windows held: steady-steps (an epoch's start-up left out and added back, amortised) |
    # whole-epochs (epochs too short for steady windows: start-ups included as the user's run pays them); "" untimed
    timed_over: str = ""


@dataclass(frozen=True)
class SourceFiles:
    """The user's source files as they were when the run started (RUN/sources.json): a change is handed back as
    an edit of these, and `diagnose apply` refuses a file whose hash has changed since."""
    folder: str  # the folder the run started in (absolute): the paths below and in the patches are relative to it
    sha256: dict[str, str] = field(default_factory=dict)  # path -> sha256 of its bytes at the start
    note: str = ""  # what was left out (too many files), when something was


@dataclass(frozen=True)
class FileEdit:
    path: str  # relative to the folder the run started in
    before_sha256: str  # the file as the run measured it
    after_sha256: str  # with the change written


@dataclass(frozen=True)
class HandBack:
    """One measured change handed back (RUN/changes/NAME.patch; the verified combination RUN/verified.patch), with
    what could not be written as an edit of the user's files said beside it (NAME.md)."""
    name: str  # what `diagnose apply --change` takes: the optimization id (a sweep's others: id-value), "verified"
    experiment: str  # the optimization id, or "combined"
    label: str  # optimization(setting), as the report says it
    verdict: str
    speedup: Optional[float]
    patch: str = ""  # relative to the run folder; "" when no part of it is an edit of a file
    note: str = ""  # relative to the run folder: how each part is written, and what is not an edit
    edits: tuple[FileEdit, ...] = ()
    not_edits: tuple[str, ...] = ()  # parts that are not edits of a file: a command line, a snippet to adapt


@dataclass(frozen=True)
class HandBacks:
    """RUN/changes/changes.json: what `diagnose apply` reads."""
    folder: str  # the folder the run started in: where the patches apply
    changes: tuple[HandBack, ...] = ()


@dataclass(frozen=True)
class Headline:
    """The report's headline: all winning compatible changes together, verified."""
    changes: tuple[str, ...]
    speedup: Optional[float]
    ci: Optional[tuple[float, float]]
    verdict: str
    metric: str
    data_loading_recovered_frac: Optional[float] = None  # of the gap between baseline and the ceiling
    ceiling_speedup: Optional[float] = None
    throughput: Optional[float] = None  # an out-of-memory run: the fastest variant that fits, in `metric`
    throughput_ci: Optional[tuple[float, float]] = None
    tied_with: tuple[str, ...] = ()  # others that fit whose interval overlaps the fastest's
    patch: str = ""  # the verified change as an edit of the user's files (verified.patch), "" when none


@dataclass(frozen=True)
class BudgetReport:
    """What the experiment budget was planned to cover and what it bought (diagnosis.json `budget`)."""
    budget_s: float
    run_estimate_s: float  # one timed run, as estimated before the first (then as measured)
    planned: tuple[str, ...]  # optimizations the plan expected verdicts for, most promising first
    decided: tuple[str, ...] = ()  # optimizations that reached a verdict (faster, slower or no-change)
    untried: tuple[str, ...] = ()  # optimizations left without a verdict: not run, or undecided
    runs: int = 0
    spent_s: float = 0.0
    too_small: bool = False  # the fewest runs of a verdict did not fit (plan.fewest_runs): nothing was run
    rest_command: str = ""  # the command that tries what is left


@dataclass(frozen=True)
class BatchProbe:
    """A short run of the script at one batch size under the memory limit: did it fit, and its peak."""
    batch_size: int
    fits: bool
    peak_bytes: Optional[int]  # what counts against the limit (CUDA: reserved; host: address space grown)
    out_of_memory: bool = False  # it did not fit: the script ran out of memory
    detail: str = ""  # the error when it did not fit, or failed otherwise (then the search stops)


@dataclass(frozen=True)
class BatchSearch:
    """The largest batch that fits (diagnosis.json `batch_search`): a line, fixed + per-sample bytes, fitted to
    two measured batch sizes, predicts it under the limit less a margin; short runs verify it, bisecting between
    the largest batch that fitted and the smallest that did not."""
    limit_bytes: int
    limit_source: str
    margin: float  # share of the limit the prediction keeps free
    probes: tuple[BatchProbe, ...] = ()  # in the order they ran
    fixed_bytes: Optional[int] = None
    per_sample_bytes: Optional[float] = None
    predicted_batch: Optional[int] = None
    largest_fitting: Optional[int] = None  # verified by a run
    smallest_failing: Optional[int] = None  # verified by a run (None: none failed up to `max_batch`)
    max_batch: Optional[int] = None  # the search's upper end (a quarter of the dataset: room for three steps)
    note: str = ""  # why it stopped where it did, or why nothing fits
    start_batch: Optional[int] = None  # the script's own batch
    # the largest batch that fitted with the margin to spare (its peak under the limit less the margin): what the
    # batch_size and grad_accumulation settings use; a longer run fragments more than three steps do
    recommended: Optional[int] = None


@dataclass(frozen=True)
class ExperimentResults:
    """RUN/experiments.json: every setting tried and the headline."""
    experiments: tuple[Experiment, ...] = ()
    headline: Optional[Headline] = None
    interrupted: bool = False  # Ctrl-C during the experiments: what was measured until then is kept
    budget: Optional[BudgetReport] = None
    batch_search: Optional[BatchSearch] = None


@dataclass(frozen=True)
class CompareSide:
    """One side of `diagnose compare`: a run folder or traces, and the facts the comparison is made from."""
    path: str
    kind: str  # run | traces
    script: str  # "" for traces
    step_s: float  # the step time compared: unprofiled window (runs) or profiled mean (traces)
    step_basis: str  # unprofiled | profiled
    steps: int  # steps behind step_s
    # spread of step times (std / mean of the profiled steps): the window's mean varies by cv/sqrt(steps)
    step_cv: float
    profiled_step_s: float
    environment: dict[str, str] = field(default_factory=dict)
    run_noise_sd: Optional[float] = None  # run-to-run spread measured by the run's repeated baseline runs
    run_noise_runs: int = 0
    # the spread of the unprofiled window's blocks (log of each block's step time, whole bursts): how far this
    # run's own step time moved while it was timed; None when the window holds fewer than MIN_BLOCKS blocks
    block_noise_sd: Optional[float] = None
    blocks: int = 0


@dataclass(frozen=True)
class StepChange:
    """B's step time over A's, with an interval that counts both runs' own spread and run-to-run variation."""
    ratio: float  # B step time / A step time: < 1 means B is faster
    ci: tuple[float, float]
    verdict: str  # faster | slower | no-change (B against A)
    basis: str  # unprofiled | profiled (both sides measured alike)
    run_noise_sd: float  # run-to-run spread per run (log scale; the two runs' root mean square)
    # the larger run's source: measured (repeated baseline runs) | blocks (the timed window's blocks) | floor (blocks
    # under the least assumed between runs) | stated (--run-noise) | assumed (the documented default)
    run_noise_source: str
    confidence: float = 0.99
    t: float = 2.58  # the quantile the interval used (Student's t at its degrees of freedom)


@dataclass(frozen=True)
class AmountChange:
    """One named amount per step on both sides: a bucket, a phase, an op or a kernel."""
    name: str
    a: float
    b: float
    detail: str = ""  # shapes of an op, the phase's launches...
    status: str = ""  # added | removed | faster | slower | same (ops and kernels)
    a_calls: float = 0.0
    b_calls: float = 0.0


@dataclass(frozen=True)
class FindingChange:
    rule: str
    title: str
    status: str  # resolved | new | unchanged
    a_cost: Optional[float]
    b_cost: Optional[float]
    category: str = ""


@dataclass(frozen=True)
class GateResult:
    """`--fail-if-slower PCT`: B fails when even the fast end of the interval is slower than PCT allows."""
    allowed_slowdown_pct: float
    failed: bool
    slowdown_low_pct: float  # the interval's lower end of B's slowdown, in percent (negative: faster)
    fails_above_pct: float = 0.0  # the smallest measured slowdown that fails, given this comparison's noise
    run_noise_sd: float = 0.0  # the run-to-run spread per run the interval counted
    # the spread per run under which a run twice as slow as allowed fails: what a gate at this allowance needs
    needs_run_noise_sd: float = 0.0


@dataclass(frozen=True)
class LiveWindow:
    """One window an interleaved comparison timed: A's or B's, in the order they ran (live.json)."""
    side: str  # "A" or "B"
    steps: int
    seconds: float
    samples: Optional[int] = None


@dataclass(frozen=True)
class LiveRound:
    """A pair of fresh processes, A and B, taking turns one window at a time."""
    windows: tuple[LiveWindow, ...]
    pair_log_ratios: tuple[float, ...]  # log(B's step time / A's) of each two windows that ran next to each other
    seconds: float  # the round's wall time, the processes' start-up and warm-up included
    ended: str = "stopped"  # stopped (by the comparison) | a side's status when it ended by itself
    pinned_cpu: Optional[int] = None  # both sides single-threaded: the CPU both were pinned to (compare/live.py)


@dataclass(frozen=True)
class LiveSide:
    label: str  # A | B
    script: str
    script_args: tuple[str, ...] = ()
    revision: Optional[str] = None  # run --baseline-ref: the git revision A was checked out at
    step_s: Optional[float] = None  # its windows' steps, their seconds over their count
    error: Optional[str] = None  # why it measured nothing


@dataclass(frozen=True)
class LiveGate:
    """--fail-if-slower on an interleaved comparison: decided on the interval, or said to be undecided."""
    allowed_slowdown_pct: float
    decision: str  # fail | pass | undecided
    failed: bool


@dataclass(frozen=True)
class LiveComparison:
    """`diagnose compare --live A.py B.py` and `run --baseline-ref REV` (live.json): A and B timed side by side,
    taking turns, round after round of fresh processes, until the interval decides or the budget is spent."""
    schema: int
    a: LiveSide
    b: LiveSide
    ratio: Optional[float]  # B's step time over A's; None when no pair was timed
    ci: Optional[tuple[float, float]]  # 99%
    verdict: str  # slower | faster | no-change | undecided | failed
    pairs: int
    pair_sd: float  # spread of one pair's log ratio (of the trimmed pairs: the winsorized spread)
    process_sd: float  # the rounds' spread beyond their pairs': fresh processes' own luck (0: none seen)
    df: float
    rounds: tuple[LiveRound, ...]
    budget_s: float
    spent_s: float
    stopped: str  # decided | budget | failed | interrupted
    gate: Optional[LiveGate] = None
    notes: tuple[str, ...] = ()
    trimmed: float = 0.0  # the share of each round's pairs trimmed from either end (0: the plain mean)


@dataclass(frozen=True)
class RunCostChange:
    """compare: the same run (A's length, else B's) at A's and at B's step time, energy per step and start-up."""
    length: RunLength
    a_train_s: float
    b_train_s: float
    b_train_s_ci: Optional[tuple[float, float]]  # the step ratio's interval carried through
    a_device_hours: float
    b_device_hours: float
    a_energy_j: Optional[float] = None  # None: that side read no energy counter
    b_energy_j: Optional[float] = None
    a_money: Optional[float] = None  # at one set of prices for both (A's, else B's)
    b_money: Optional[float] = None
    price_per_hour: Optional[float] = None
    price_per_kwh: Optional[float] = None


@dataclass(frozen=True)
class Comparison:
    """RUN/compare.json: B against A (schema 1)."""
    schema: int
    a: CompareSide
    b: CompareSide
    step: StepChange
    buckets: tuple[AmountChange, ...]  # seconds per step, profiled
    phases: tuple[AmountChange, ...]  # GPU seconds per step per phase (detail: launches)
    ops: tuple[AmountChange, ...]  # CPU ops, self seconds per step, most changed first
    kernels: tuple[AmountChange, ...]  # GPU kernels, copies and memsets, seconds per step, most changed first
    findings: tuple[FindingChange, ...]
    environment_changes: tuple[tuple[str, str, str], ...] = ()  # (what, A, B) where they differ
    gate: Optional[GateResult] = None
    notes: tuple[str, ...] = ()
    run_cost: Optional[RunCostChange] = None  # the same run's hours, kWh and money on both sides


@dataclass(frozen=True)
class RunCostOption:
    """The whole run now, or with one verified change (or all of them, `combined`): its time, energy and money.
    Intervals (`_ci`) carry the experiment's 99% interval of the speedup through; None where nothing was measured."""
    label: str  # "now", or the change as optimization(setting)
    optimization: str  # "" for now; an optimization id or "combined"
    speedup: float  # 1.0 for now
    speedup_ci: Optional[tuple[float, float]]
    train_s: Optional[float]  # the whole run: steps x step time (over the speedup) + start-up, once
    train_s_ci: Optional[tuple[float, float]]
    startup_s: Optional[float]
    energy_j: Optional[float] = None  # the whole run, where energy per step was measured for this option
    energy_j_ci: Optional[tuple[float, float]] = None
    device_hours: Optional[float] = None  # train_s x devices
    money: Optional[float] = None  # device-hours x price per hour + kWh x price per kWh, where both were given
    money_ci: Optional[tuple[float, float]] = None
    energy_note: str = ""  # why no energy figure for this option
    saved_s: Optional[float] = None  # the run now less this option's run (None for now itself)
    saved_money: Optional[float] = None


@dataclass(frozen=True)
class RunCost:
    """What the run the script is written for costs, now and after each verified change (diagnosis.json run_cost)."""
    length: RunLength
    step_s: float  # the unprofiled step time the projection runs at
    step_basis: str  # unprofiled | profiled
    startup_s: Optional[float]  # measured, added once
    devices: int  # devices the price per hour is paid for (every rank's GPUs; 1 for a CPU-only run)
    samples_per_step: Optional[int] = None
    energy_per_step_j: Optional[float] = None  # every domain read, summed (gpu + host)
    energy_per_sample_j: Optional[float] = None
    energy_sources: tuple[str, ...] = ()  # "gpu: nvml-energy-counter (1 device)", ...
    energy_note: str = ""  # why energy is unavailable, or what it leaves out
    price_per_hour: Optional[float] = None
    price_per_kwh: Optional[float] = None
    options: tuple[RunCostOption, ...] = ()  # now first, then each verified change, the combination last


def unprofiled_step_s(capture: Optional[Capture]) -> Optional[float]:
    """Seconds per step timed before the profiled window with the profiler off; None when not measured (a trace
    analysed on its own, a script that ended before the window closed, steps too long to time and profile, a
    window that closed before its first step)."""
    window = capture.unprofiled_window if capture is not None else None
    return window.step_s if window is not None and window.steps > 0 else None


def stated_step_s(step_time_s: dict) -> Optional[float]:
    """The step time every report states: timed without the profiler when it was (`unprofiled`), else the
    profiled steps' `mean`; None when neither was measured."""
    return step_time_s.get("unprofiled") or step_time_s.get("mean") or None


@dataclass(frozen=True)
class CompileTrial:
    """A change to how the model compiles, measured: its steady speedup and what it does over the whole run, where
    the compile time each pays once counts (verdict/compile_cost.py)."""
    label: str  # the change as optimization(setting)
    optimization: str
    speedup: Optional[float]  # steady steps/s against the baseline (the experiment's)
    speedup_ci: Optional[tuple[float, float]]
    compile_s: Optional[float]  # the variant's compile time in its timed runs (median)
    baseline_compile_s: Optional[float]
    run_steps: Optional[float]  # the whole run's steps it is counted over
    # the baseline's whole run over the variant's: each its steps at its steady step, its compile time, and its
    # process start to the first step (imports, data, the first compile)
    run_speedup: Optional[float] = None
    run_speedup_ci: Optional[tuple[float, float]] = None
    run_verdict: str = ""  # faster | slower | no-change | undecided over the whole run; "" where not counted


@dataclass(frozen=True)
class CompileSummary:
    """What torch.compile costs the run and whether it pays (diagnosis.json `compilation`)."""
    torch_version: str
    compile_s: float  # this run's compilations, all together (dynamo, AOT autograd, inductor, the backward)
    first_step_s: float  # of which before the first step ended
    recompile_s: float
    recompiles: int
    graph_breaks: int
    split_s: dict[str, float]  # dynamo, aot_autograd, inductor, codegen (part of inductor), autotune, backward
    # this run's: cold (the run's own cache, empty at its start; or every lookup missed) | warm (every lookup hit)
    # | mixed | unknown
    cache: str
    cold_s: Optional[float]  # compile time with an empty cache: this run's when it was cold
    warm_s: Optional[float]  # with a warm cache: the timed runs after this one (median), or this run's when warm
    eager_step_s: Optional[float] = None  # the same step not compiled (the eager experiment), where measured
    compiled_step_s: Optional[float] = None  # the step as the script runs it
    saved_per_step_s: Optional[float] = None  # eager - compiled: negative when compiling makes steps slower
    break_even_steps: Optional[float] = None  # steps for the saving to repay warm_s (else compile_s)
    run_steps: Optional[float] = None  # the whole run's steps, where known
    note: str = ""  # why a figure is missing, or what it rests on
    trials: tuple[CompileTrial, ...] = ()
    eager_after_limit: tuple[str, ...] = ()  # frames past the recompile limit, running eagerly


@dataclass(frozen=True)
class Diagnosis:
    """The stable contract written to RUN/diagnosis.json (schema 1)."""
    schema: int
    script: str
    steps_profiled: int
    step_time_s: dict[str, Optional[float]]
    breakdown: dict[str, float]
    findings: tuple[Finding, ...]
    experiments: tuple[Experiment, ...] = ()
    status: str = Status.COMPLETED
    metrics: dict[str, Optional[float]] = field(default_factory=dict)
    headline: Optional[Headline] = None
    ranks: tuple[RankSummary, ...] = ()
    experiments_interrupted: bool = False  # Ctrl-C during the experiments: those listed are what was measured
    phases: tuple[PhaseStat, ...] = ()  # GPU runs: launches and device time per phase (data, forward, ...)
    budget: Optional[BudgetReport] = None  # what the experiment budget covered and bought
    out_of_memory: Optional[OutOfMemory] = None  # status out_of_memory: the step, phase and sizes
    memory: Optional[MemoryBreakdown] = None  # the peak, its parts and its phase
    batch_search: Optional[BatchSearch] = None  # the largest batch that fits, when it was searched
    speed_of_light: Optional[SpeedOfLight] = None  # FLOPs per step, MFU, the speed-of-light step time
    startup_s: Optional[float] = None  # the script's start to its first step (startup.seconds)
    startup: Optional[Startup] = None  # the time before the first step and what it went to
    # each finding's predicted speedup beside what its best experiment measured; how many were off by over 2x
    predictions: tuple[PredictionCheck, ...] = ()
    predictions_off: int = 0
    hang: Optional[Hang] = None  # status hung: where the step that never ended waited
    worker_failure: Optional[WorkerFailure] = None  # the script's error was a DataLoader worker's death
    run_cost: Optional[RunCost] = None  # the run's time, energy and money, now and with each verified change
    compilation: Optional[CompileSummary] = None  # torch.compile: compile time, cache, break-even, changes tried
