"""Lists that must agree with each other: what rules name exists, what the package holds is registered."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from diagnose import rules as rule_engine
from diagnose.analysis.metrics import METRICS
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.recommendation import Recommendation

RULES = rule_engine.load_rules(optimization_ids=REGISTRY)
OPTIMIZATIONS_DIR = Path(rule_engine.__file__).parent / "optimizations"


def _registered_classes(path: Path) -> list[str]:
    """Names of the classes a module decorates with @register."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list)]


def test_every_optimization_module_in_the_package_is_registered():
    modules = {p.stem: _registered_classes(p) for p in OPTIMIZATIONS_DIR.glob("*.py")}
    registered = {(type(o).__module__.rsplit(".", 1)[-1], type(o).__name__) for o in REGISTRY.values()}
    declared = {(module, name) for module, names in modules.items() for name in names}
    assert declared == registered
    assert len(declared) == len(REGISTRY)  # one id per class: none registered over another


def test_every_optimization_class_with_an_id_is_registered():
    # an Optimization subclass with an id but without @register would be silently unused
    from diagnose.optimizations.base import Optimization

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    with_ids = {c for c in subclasses(Optimization) if c.id and c.__module__.startswith("diagnose.optimizations.")}
    assert with_ids == {type(o) for o in REGISTRY.values()}


def test_every_optimization_a_rule_names_is_registered():
    named = {o for rule in RULES for o in rule.optimizations}
    assert named <= REGISTRY.keys()
    advice_only = {i for i, o in REGISTRY.items() if isinstance(o, Recommendation)}
    assert advice_only <= named  # a recommendation that no rule names would never be shown


def test_run_folder_names_are_spelled_only_in_the_layout():
    # `path / "capture.json"` elsewhere would be a second place to keep a name: RunFolder names the paths
    from diagnose.record.layout import OWN_ENTRIES

    package = OPTIMIZATIONS_DIR.parent
    spelled = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                    and node.right.value in OWN_ENTRIES):
                spelled.append(f"{path.relative_to(package)}:{node.lineno} {node.right.value}")
    assert spelled == []


# Metrics no stored input here computes (each is checked where its input exists); the test below fails when
# this list is longer than it must be, so it only shrinks.
NOT_COMPUTED_HERE = {
    "straggler_rank": "ranks that wait unevenly in collectives (test_distributed's ddp_straggler run checks it)",
    "straggler_compute_ratio": "a straggler (test_distributed's ddp_straggler run checks it)",
    "gpu_util_mean_frac": "NVML samples of a GPU run (test_report_commands checks it on made-up samples)",
    "memory_outside_torch_frac": "NVML's used memory on a GPU (test_memory checks it on an H200 trace with made-up "
                                 "NVML samples)",
    "loss_nonfinite_step": "a loss that goes NaN (test_training_health's diverging run checks it)",
    "loss_last_finite": "a loss that goes NaN (test_training_health's diverging run checks it)",
    **dict.fromkeys(("ddp_find_unused_parameters", "ddp_static_graph", "ddp_gradient_as_bucket_view",
                     "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_gradient_mb", "ddp_unused_parameters",
                     "ddp_backwards_per_step", "ddp_synced_backwards_per_step", "world_size", "ddp_find_unused_frac"),
                    "a DistributedDataParallel run (test_distributed's ddp_settings run checks them)"),
    **dict.fromkeys(("fsdp_units", "fsdp_resharding_units"),
                    "an FSDP2 run (test_distributed's fsdp2_train run checks them)"),
}


def _computed(metrics: dict) -> set[str]:
    return {name for name, value in metrics.items() if value is not None}


def _computed_from_traces() -> set[str]:
    from conftest import TRACES

    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.analysis.sources import analyze_traces
    from diagnose.trace.load import load_trace

    computed = set()
    for path in sorted(TRACES.rglob("*.json.gz")):
        computed |= _computed(analyze(Inputs(load_trace(path))).metrics)
    return computed | _computed(analyze_traces(sorted((TRACES / "two_ranks").glob("*.json.gz"))).metrics)


def _computed_in_run_mode(run) -> set[str]:
    """A real CPU run's capture, samples and stacks; then the same capture with the fields a GPU run fills in and
    an optimizer built with foreach=False."""
    from dataclasses import replace

    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.record.run_record import RunRecord
    from diagnose.trace.load import load_trace

    record = RunRecord(run.run_dir)
    capture = record.capture()
    on_gpu = replace(capture, memory_kind="cuda", peak_memory_bytes=75 << 30, memory_capacity_bytes=80 << 30,
                     allocator={"alloc_retries": 9, "ooms": 0, "peak_allocated_bytes": 40 << 30,
                                "peak_reserved_bytes": 75 << 30},
                     optimizers=tuple(replace(o, foreach=False) for o in capture.optimizers))
    [trace] = record.trace_paths()
    inputs = Inputs(load_trace(trace), on_gpu, record.samples(), record.stacks())
    return _computed(run.diagnosis["metrics"]) | _computed(analyze(inputs).metrics)


def _computed_for_a_compiled_run() -> set[str]:
    """The recorded run of sample_runs/compiled_branch.py (a graph break), and its capture as if compiled with
    dynamic=False."""
    from dataclasses import replace

    from diagnose.analysis.analyze import Inputs, analyze
    from diagnose.model import Capture
    from diagnose.serial import read_json
    from diagnose.trace.load import load_trace

    recorded = Path(__file__).resolve().parent / "data" / "runs" / "compiled_branch"
    capture = read_json(recorded / "capture.json", Capture)
    capture = replace(capture, compilation=replace(capture.compilation, dynamic=False))
    return _computed(analyze(Inputs(load_trace(next(recorded.glob("*.json.gz"))), capture)).metrics)


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_every_metric_is_computed_from_real_inputs(sample_run):
    from diagnose.analysis.metrics import METRICS

    computed = _computed_from_traces() | _computed_in_run_mode(sample_run("slow_loader.py"))
    computed |= _computed(sample_run("streaming_loader.py").diagnosis["metrics"])  # an IterableDataset's
    # host work's split between the user's lines and torch's needs stack samples inside host work: a sample
    # that has some (slow_loader's 1% gets none in some runs)
    computed |= _computed(sample_run("host_overhead.py").diagnosis["metrics"])
    computed |= _computed_for_a_compiled_run()
    named = {name for rule in RULES for name in rule.condition.names | rule.cost.names}
    assert named <= METRICS.keys()  # the rules' loader checks this too
    assert named - computed <= NOT_COMPUTED_HERE.keys()
    assert set(METRICS) - computed == NOT_COMPUTED_HERE.keys()


def test_every_rule_file_is_named_after_its_id():
    assert [r.path.name for r in RULES] == [f"{r.id}.toml" for r in RULES]


def test_every_category_has_its_wording_and_every_rule_one_of_them():
    from diagnose.model import CATEGORIES
    from diagnose.report.wording import CATEGORY_NAMES

    assert set(CATEGORY_NAMES) == set(CATEGORIES)  # a category without words is a KeyError while rendering
    assert {r.category for r in RULES} <= set(CATEGORIES)


def _metric_reads(tree: ast.AST):
    """(line, name) for each metric read by a literal name: `ctx.metric("x")`, `metrics.get("x")`, `metrics["x"]`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            reader, owner = node.func.attr, ast.unparse(node.func.value)
            if (reader == "metric" or (reader == "get" and owner.endswith("metrics"))) \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("metrics") \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            yield node.lineno, node.slice.value


def test_every_metric_the_code_reads_by_name_is_in_the_registry():
    package = Path(rule_engine.__file__).parent
    reads = [(f"{path.relative_to(package.parent)}:{line}", name) for path in sorted(package.rglob("*.py"))
             for line, name in _metric_reads(ast.parse(path.read_text(encoding="utf-8")))]
    assert len(reads) >= 10  # the scan finds the reads outside the rules (optimizations, compare, report...)
    assert [(where, name) for where, name in reads if name not in METRICS] == []
