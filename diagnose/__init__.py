"""diagnose: find what holds a PyTorch training script back, and say which line to change."""
from __future__ import annotations

import importlib

from diagnose import step_hook

__version__ = "0.1.0"

# The Python doors, loaded on first use so that `import diagnose` (and the capture child that imports it for
# diagnose.step) stays free of torch, numpy and the pipeline. The top layer (diagnose.api) is reached by name, not
# imported: nothing below it depends on it (tests/test_layers.py).
PUBLIC = {"run": "diagnose.api.calls", "analyze": "diagnose.api.calls",
          "Result": "diagnose.api.results", "ComparisonResult": "diagnose.api.results", "load": "diagnose.api.calls",
          "window": "diagnose.api.window", "Window": "diagnose.api.window", "UserError": "diagnose.errors",
          "HuggingFaceCallback": "diagnose.api.hf", "LightningCallback": "diagnose.api.lightning",
          "load_ipython_extension": "diagnose.api.magic", "unload_ipython_extension": "diagnose.api.magic"}
# a star import takes the cheap names only: the callbacks and the magic would import transformers, Lightning, IPython
__all__ = ["step", "__version__", "run", "analyze", "compare", "load", "window", "Window", "Result",
           "ComparisonResult", "UserError"]

def step() -> None:
    """Mark the start of a training step. A no-op unless the script runs under `diagnose run` (or in a %%diagnose
    notebook cell).

    Only needed when diagnose cannot find steps by itself (no DataLoader, no backward(), no optimizer):
        for batch in my_batches():
            diagnose.step()
            ...
    """
    step_hook.step()


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'diagnose' has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name]), name)


# `diagnose.compare` names the compare stage's package too: Python sets a subpackage on its parent when it first loads
# it, which would put the package over the function below. Loaded here first (it imports nothing), it never is.
importlib.import_module("diagnose.compare")


def compare(a, b, **options):
    """B against A, as `diagnose compare A B` (diagnose.api.calls.compare)."""
    return importlib.import_module("diagnose.api.calls").compare(a, b, **options)
