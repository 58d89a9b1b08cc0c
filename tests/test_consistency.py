"""Lists that must agree with each other: what rules name exists, what the package holds is registered."""
from __future__ import annotations

import ast
from pathlib import Path

from diagnose import rules as rule_engine
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


def test_run_folder_names_are_spelled_only_in_runfolder():
    # `path / "capture.json"` elsewhere would be a second place to keep a name: RunFolder names the paths
    from diagnose.runfolder import OWN_ENTRIES

    package = OPTIMIZATIONS_DIR.parent
    spelled = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                    and node.right.value in OWN_ENTRIES):
                spelled.append(f"{path.relative_to(package)}:{node.lineno} {node.right.value}")
    assert spelled == []

