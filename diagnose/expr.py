"""A tiny, safe expression language for rule conditions: metric names, numbers, comparisons, and/or/not,
+ - * /, min(), max(), known(), first() (the first known value). Parsed with `ast`, checked against a
whitelist, evaluated by our own walker: no eval(), no attribute access, no calls beyond those four.

A metric that is unknown for this run is None: arithmetic with None gives None, a comparison with None is
False, so a rule about GPUs stays silent on a CPU run.
"""
from __future__ import annotations

import ast
import operator
from typing import Any, Mapping, Optional

COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
FUNCTIONS = {"min", "max", "known", "first"}


class ExprError(ValueError):
    pass


class Expr:
    def __init__(self, source: str):
        self.source = source
        try:
            self.tree = ast.parse(" ".join(source.split()), mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"bad syntax in `{source}`: {exc.msg}") from None
        self.names: set[str] = set()
        self._check(self.tree.body)

    def _check(self, node: ast.AST) -> None:
        if isinstance(node, ast.BoolOp) or isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            pass
        elif isinstance(node, ast.Compare):
            if not all(type(op) in COMPARE for op in node.ops):
                raise ExprError(f"unsupported comparison in `{self.source}`")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in ARITH:
                raise ExprError(f"unsupported operator in `{self.source}`")
        elif isinstance(node, ast.Name):
            self.names.add(node.id)
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, bool)):
                raise ExprError(f"only numbers are allowed as constants in `{self.source}`")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                raise ExprError(f"only min(), max(), known() and first() may be called in `{self.source}`")
            for arg in node.args:
                self._check(arg)
            return
        else:
            raise ExprError(f"`{ast.unparse(node)}` is not allowed in a rule expression (`{self.source}`)")
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.operator, ast.boolop, ast.unaryop, ast.cmpop, ast.expr_context)):
                self._check(child)

    def evaluate(self, values: Mapping[str, Optional[float]]) -> Any:
        return _eval(self.tree.body, values)


def _eval(node: ast.AST, values: Mapping[str, Optional[float]]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values.get(node.id)
    if isinstance(node, ast.BoolOp):
        results = (_eval(v, values) for v in node.values)
        return all(bool(r) for r in results) if isinstance(node.op, ast.And) else any(bool(r) for r in results)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, values)
        if isinstance(node.op, ast.Not):
            return not value
        return None if value is None else -value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values), _eval(node.right, values)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return ARITH[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        return _compare(node, values)
    if isinstance(node, ast.Call):
        return _call(node, values)
    raise ExprError(f"cannot evaluate {ast.unparse(node)}")


def _compare(node: ast.Compare, values) -> bool:
    left = _eval(node.left, values)
    for op, right_node in zip(node.ops, node.comparators):
        right = _eval(right_node, values)
        if left is None or right is None or not COMPARE[type(op)](left, right):
            return False
        left = right
    return True


def _call(node: ast.Call, values) -> Any:
    args = [_eval(a, values) for a in node.args]
    if node.func.id == "known":
        return all(a is not None for a in args)
    if node.func.id == "first":
        return next((a for a in args if a is not None), None)
    present = [a for a in args if a is not None]
    if not present:
        return None
    return min(present) if node.func.id == "min" else max(present)
