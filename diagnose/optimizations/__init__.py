"""Optimizations are code: one module each, registered by id in REGISTRY.

Every module of this package is imported here, so a new optimization registers itself by being in the package
(no list to forget). Its ids are the ones rules and `--experiments` may name, including recommendations that
are never applied automatically (their modules derive from Recommendation)."""
from __future__ import annotations

import importlib
import pkgutil

from diagnose.optimizations.registry import REGISTRY

for _module in pkgutil.iter_modules(__path__):  # sorted by name: REGISTRY's order is `--experiments all`'s
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY"]
