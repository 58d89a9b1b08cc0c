"""Where a framework-built DataLoader or optimizer is configured: the user's TrainingArguments(...) or
Trainer(...) line, recorded on the object when it is made (frameworks are imported lazily by the user's script,
so an import hook patches their classes as their modules load). A timed run that applies a change as the
framework's setting (logging_steps=50) sets it there too, as if the user's call had said it."""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from types import FrameType
from typing import Any, Optional

import diagnose.frameworks.catalog as frameworks
from diagnose.capture.sites import is_framework_file, is_user_file, user_location
from diagnose.frameworks.framework import Framework
from diagnose.model import FrameworkSite

STAMP = "_diagnose_location"
# framework name -> setting -> value, for the configuring calls made while installed (a timed run's changes)
_SETTINGS: dict[str, dict[str, Any]] = {}


def _stamp(cls: type, method: str, framework: str) -> None:
    original = cls.__dict__.get(method)
    if original is None or getattr(original, "_diagnose_stamp", False):
        return

    @functools.wraps(original)
    def stamped(obj, *args, **kwargs):
        if getattr(obj, STAMP, None) is None:
            # set before the original runs: a frozen or validating class may refuse it afterwards
            object.__setattr__(obj, STAMP, user_location(sys._getframe(1)))
        settings = _SETTINGS.get(framework, {})
        if method == "__init__":
            kwargs.update(settings)  # the configuring call's keywords (Lightning's Trainer takes keywords only)
        else:  # a dataclass's __post_init__: its fields are set, not yet validated or derived from
            for name, value in settings.items():
                object.__setattr__(obj, name, value)
        return original(obj, *args, **kwargs)

    stamped._diagnose_stamp = True
    setattr(cls, method, stamped)


class _StampingFinder(importlib.abc.MetaPathFinder):
    """Patches each framework class as soon as its module has run."""

    def __init__(self, wanted: dict[str, list[tuple[str, str, str]]]):
        self.wanted = wanted

    def find_spec(self, name, path=None, target=None):
        if name not in self.wanted:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, classes = spec.loader.exec_module, self.wanted[name]

        def exec_module(module):
            execute(module)
            for cls_name, method, framework in classes:
                if isinstance(getattr(module, cls_name, None), type):
                    _stamp(getattr(module, cls_name), method, framework)

        spec.loader.exec_module = exec_module
        return spec


def install(settings: Optional[dict[str, dict[str, Any]]] = None) -> callable:
    """Record the configuring calls' lines from now on, and give them `settings` (framework -> setting -> value);
    returns the undo."""
    _SETTINGS.clear()
    _SETTINGS.update(settings or {})
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for framework in frameworks.FRAMEWORKS.values():
        for module, cls, method in framework.stamps:
            if module in sys.modules:  # already imported (by an earlier run in this process)
                _stamp(getattr(sys.modules[module], cls), method, framework.name)
            else:
                wanted.setdefault(module, []).append((cls, method, framework.name))
    finder = _StampingFinder(wanted)
    sys.meta_path.insert(0, finder)

    def undo() -> None:
        _SETTINGS.clear()
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return undo


def built_by_framework(frame: Optional[FrameType], obj: Any) -> bool:
    """`obj` was made by library code (a framework), not by a line of the user's: the first frame outside torch's
    machinery, diagnose and `obj`'s own construction (subclass __init__s, wrappers Lightning puts around
    DataLoader.__init__ to record its arguments) is not the user's."""
    while frame is not None and (is_framework_file(frame.f_code.co_filename) or _first_argument(frame) is obj):
        frame = frame.f_back
    return frame is not None and not is_user_file(frame.f_code.co_filename)


def _first_argument(frame: FrameType) -> Any:
    code = frame.f_code
    return frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None


def remade_from(frame: Optional[FrameType], cls: type) -> Optional[Any]:
    """The recorded object of class `cls` that library code up this stack is re-making (Lightning re-makes the
    user's DataLoader to set its sampler, accelerate wraps the Trainer's): the new one is configured where the
    old one was."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        for value in frame.f_locals.values():
            if isinstance(value, cls) and getattr(value, "_diagnose_index", None) is not None:
                return value
        frame = frame.f_back
    return None


def running(frame: Optional[FrameType]) -> Optional[tuple[Framework, Any, FrameType]]:
    """The framework whose Trainer is running somewhere up this stack, its trainer and that trainer's frame."""
    while frame is not None:
        obj = frame.f_locals.get("self") if frame.f_code.co_varnames[:1] == ("self",) else None
        framework = frameworks.owner_of(obj) if obj is not None else None
        if framework is not None:
            return framework, obj, frame
        frame = frame.f_back
    return None


def site(frame: Optional[FrameType]) -> Optional[FrameworkSite]:
    found = running(frame)
    if found is None:
        return None
    framework, trainer, trainer_frame = found
    config = framework.config_of(trainer)
    return FrameworkSite(name=framework.name, location=getattr(config, STAMP, None),
                         entry=user_location(trainer_frame), settings=_watched(framework, config))


def _watched(framework: Framework, config: Any) -> dict[str, str]:
    """The values the run had of the settings the framework's fixes change (an enum as its value)."""
    values = {}
    for name in framework.watched:
        value = getattr(config, name, None)
        if value is not None:
            values[name] = str(getattr(value, "value", value))
    return values
