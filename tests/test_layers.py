"""The pipeline's direction, checked: a module imports only from its own layer and the layers below it.

    model/serial/errors <- record <- trace <- capture <- analysis <- rules <- verdict <- experiments <- compare
        <- report <- commands <- api <- cli

The record (diagnose/record/) owns the run folder: it loads and saves the model's records there, so it sits right
above them, and every stage that reads or writes a run folder does it through a RunRecord.

verdict (the diagnosis assembled, predictions checked, the run's cost and money, the statistics that decide a
verdict) sits below experiments: `diagnose analyze` builds a diagnosis without entering experiments/, and the
experiments decide their verdicts with its statistics.

The trace package reads traces behind one surface (diagnose/trace/__init__.py): analysis/ and compare/ import
that surface, never a module inside the package (test_analysis_and_compare_read_traces_through_the_surface).

Every import counts, those inside functions too (a lazy import is still a dependency). A new module must be given
a layer here; a new import against the direction fails with the module, the line and the two layers named."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "diagnose"

# lowest first; a module belongs to the layer of its longest listed prefix
LAYERS = (
    ("base", ("diagnose", "diagnose.model", "diagnose.serial", "diagnose.errors", "diagnose.resources",
              "diagnose.formatting", "diagnose.step_hook", "diagnose.lean_dataclass")),
    ("record", ("diagnose.record",)),
    ("trace", ("diagnose.trace",)),
    ("capture", ("diagnose.capture", "diagnose.frameworks")),
    ("analysis", ("diagnose.analysis", "diagnose.tbcompat")),
    ("rules", ("diagnose.rules", "diagnose.expr")),
    ("verdict", ("diagnose.verdict",)),
    ("experiments", ("diagnose.experiments", "diagnose.optimizations")),
    ("compare", ("diagnose.compare",)),
    ("report", ("diagnose.report",)),
    ("commands", ("diagnose.commands",)),
    ("api", ("diagnose.api",)),
    ("cli", ("diagnose.cli", "diagnose.__main__")),
)
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    best, best_len = None, -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            exact_only = prefix == "diagnose"  # the package's own __init__, not everything under it
            matches = module == prefix or (not exact_only and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST):
    """(line, module) for every import of diagnose's own modules; `from diagnose.x import y` is diagnose.x.y when
    y is a module. diagnose uses no relative imports (test_no_relative_imports)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "diagnose")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "diagnose":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield node.lineno, candidate if _is_module(candidate) else node.module


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts)


def test_every_module_has_a_layer():
    missing = [module_name(p) for p in modules() if layer_of(module_name(p)) is None]
    assert missing == [], f"give these modules a layer in tests/test_layers.py: {missing}"


def test_imports_follow_the_pipeline_direction():
    wrong = []
    for path in modules():
        name = module_name(path)
        mine = layer_of(name)
        for line, target in imported_modules(ast.parse(path.read_text(), str(path))):
            theirs = layer_of(target)
            if mine and theirs and RANK[theirs] > RANK[mine]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({mine}) imports {target} ({theirs})")
    assert wrong == [], "imports against the pipeline's direction:\n" + "\n".join(wrong)


def test_the_check_sees_a_lazy_import_against_the_direction():
    tree = ast.parse("def f():\n    from diagnose.report.charts import breakdown_bar\n")
    found = [target for _, target in imported_modules(tree)]
    assert found == ["diagnose.report.charts"] and RANK[layer_of(found[0])] > RANK[layer_of("diagnose.analysis.x")]


def test_no_relative_imports():
    relative = [f"{p.relative_to(PACKAGE.parent)}:{n.lineno}" for p in modules()
                for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert relative == [], f"write these imports in full, as the layer check reads them: {relative}"


def test_package_inits_are_thin():
    """A package's __init__ defines nothing, so its submodules never import back from it (diagnose/__init__.py
    holds the public diagnose.step() only; diagnose/trace/__init__.py a module __getattr__ that looks its surface's
    names up in its modules)."""
    heavy = []
    for path in PACKAGE.rglob("__init__.py"):
        defined = [n.name for n in ast.parse(path.read_text()).body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name != "__getattr__"]
        if defined and path.parent != PACKAGE:
            heavy.append(f"{path.relative_to(PACKAGE.parent)}: {', '.join(defined)}")
    assert heavy == [], f"move these into a module of their package: {heavy}"


SURFACE_USERS = ("diagnose.analysis", "diagnose.compare")


def test_analysis_and_compare_read_traces_through_the_surface():
    """How a trace is read (parsers, numba, forking, the prefetch cache, memory given back) may change inside
    diagnose/trace/ without touching the analyzers: they import its surface, and the modules it names whole."""
    from diagnose import trace

    allowed = {"diagnose.trace", *(f"diagnose.trace.{m}" for m in trace.SURFACE_MODULES)}
    inside = []
    for path in modules():
        name = module_name(path)
        if not name.startswith(tuple(f"{u}." for u in SURFACE_USERS)):
            continue
        for line, target in imported_modules(ast.parse(path.read_text(), str(path))):
            if target.startswith("diagnose.trace.") and target not in allowed:
                inside.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert inside == [], "import these names from diagnose.trace (its SURFACE):\n" + "\n".join(inside)


def test_the_trace_surface_names_what_its_modules_define_and_no_name_is_also_a_module():
    """A surface name that were also a submodule's would be the module once that submodule is imported."""
    from diagnose import trace

    submodules = {p.stem for p in (PACKAGE / "trace").glob("*.py")}
    assert not submodules & set(trace.SURFACE)
    for name in trace.SURFACE:
        assert getattr(trace, name) is not None
