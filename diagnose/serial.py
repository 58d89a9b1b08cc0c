"""JSON round-trip for the frozen dataclasses that travel between pipeline stages."""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import orjson

from diagnose.errors import UserError

T = TypeVar("T")


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


def from_jsonable(cls: Any, data: Any) -> Any:
    """Build `cls` (a type hint) from plain JSON data, recursing through dataclasses and containers."""
    if data is None:
        return None
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(cls) if a is not type(None)]
        return from_jsonable(options[0], data) if len(options) == 1 else data
    if origin in (list, tuple):
        args = typing.get_args(cls)
        item = args[0] if args else Any
        items = [from_jsonable(item, v) for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        _, value_type = typing.get_args(cls) or (str, Any)
        return {k: from_jsonable(value_type, v) for k, v in data.items()}
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: from_jsonable(hints[k], v) for k, v in data.items() if k in known})
    if cls is float and isinstance(data, int):
        return float(data)
    return data


def dumps(obj: Any) -> bytes:
    return orjson.dumps(to_jsonable(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # several ranks may write the same file at once
    tmp.write_bytes(dumps(obj))
    tmp.replace(path)


def read_json(path: Path, cls: type[T]) -> T:
    """A file diagnose wrote; a damaged one (cut short by a full disk, edited by hand, another version's) is the
    user's to know about, named, not a traceback."""
    try:
        return from_jsonable(cls, orjson.loads(path.read_bytes()))
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError) as exc:
        raise UserError(f"cannot read {path}: {exc}",
                        "the file is damaged or was written by another version of diagnose; run again") from None
