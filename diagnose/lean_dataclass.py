"""`@dataclass(frozen=True)` for the records (model.py) and the other frozen values, without the code generation: the
standard decorator writes and compiles six methods per class at every import (no bytecode cache keeps them), about
0.7 ms a class and most of the start-up of `diagnose analyze` on a small trace (issue 54). Here the fields are the
standard library's (`dataclasses.fields`, `replace`, `asdict` and serial.py work as before) and the methods are the
same few functions shared by every record: __init__ (positional or keyword, defaults and default factories,
__post_init__), __repr__, __eq__ and __hash__ over the fields, and assignment refused with FrozenInstanceError."""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError, field

__all__ = ["dataclass", "field"]

_SPEC = "__lean_fields__"  # per class: ((name, default, default_factory), ...) of its __init__'s fields, in order


def dataclass(cls=None, /, *, frozen: bool = True):
    """The frozen dataclass of `cls`; frozen=True only (the records are values), said so the line reads as the
    standard one does."""
    if not frozen:
        raise TypeError("lean dataclasses are frozen: use dataclasses.dataclass for a mutable one")
    return _lean if cls is None else _lean(cls)


def _lean(cls):
    if cls.__dict__.get("__doc__") is None:  # as the standard decorator names it, without its inspect.signature
        cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', {}))})"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # the fields, and no generated code
    all_fields = dataclasses.fields(cls)
    setattr(cls, _SPEC, tuple((f.name, f.default, f.default_factory) for f in all_fields if f.init))
    cls.__lean_compared__ = tuple(f.name for f in all_fields if f.compare)
    cls.__lean_shown__ = tuple(f.name for f in all_fields if f.repr)
    for name, method in (("__init__", _init), ("__repr__", _repr), ("__eq__", _eq)):
        if name not in cls.__dict__:  # one the class writes itself stays, as with the standard decorator
            setattr(cls, name, method)
    if cls.__dict__.get("__hash__") is None:
        cls.__hash__ = _hash
    cls.__setattr__, cls.__delattr__ = _refuse_set, _refuse_delete
    return cls


def _init(self, *args, **kwargs) -> None:
    spec = getattr(type(self), _SPEC)
    if len(args) > len(spec):
        raise TypeError(f"{type(self).__name__}() takes {len(spec)} arguments but {len(args)} were given")
    assign = object.__setattr__
    for (name, _, _), value in zip(spec, args):
        if name in kwargs:
            raise TypeError(f"{type(self).__name__}() got multiple values for argument '{name}'")
        assign(self, name, value)
    for name, default, factory in spec[len(args):]:
        if name in kwargs:
            assign(self, name, kwargs.pop(name))
        elif factory is not MISSING:
            assign(self, name, factory())
        elif default is not MISSING:
            assign(self, name, default)
        else:
            raise TypeError(f"{type(self).__name__}() missing 1 required argument: '{name}'")
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument '{next(iter(kwargs))}'")
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _values(record) -> tuple:
    return tuple(getattr(record, name) for name in record.__lean_compared__)


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__lean_shown__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def _refuse_set(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")
