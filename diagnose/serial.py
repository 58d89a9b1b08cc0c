"""JSON round-trip for the frozen dataclasses that travel between pipeline stages."""
from __future__ import annotations

import dataclasses
import os
import types
import typing
import warnings
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


class UnknownFieldsWarning(UserWarning):
    """A file holds fields this version does not read (a newer diagnose wrote it): they are ignored, and said."""


class MissingFieldError(ValueError):
    """A file lacks a field this version needs (an older or damaged file)."""


def from_jsonable(cls: Any, data: Any, unknown: list[str] | None = None, where: str = "") -> Any:
    """Build `cls` (a type hint) from plain JSON data, recursing through dataclasses and containers. Keys no field
    has are listed in `unknown` (as paths: `experiments[].name`); a field without a default that the data lacks
    raises MissingFieldError naming its path."""
    if data is None:
        return None
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(cls) if a is not type(None)]
        return from_jsonable(options[0], data, unknown, where) if len(options) == 1 else data
    if origin in (list, tuple):
        args = typing.get_args(cls)
        item = args[0] if args else Any
        items = [from_jsonable(item, v, unknown, f"{where}[]") for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        _, value_type = typing.get_args(cls) or (str, Any)
        return {k: from_jsonable(value_type, v, unknown, f"{where}.{k}") for k, v in data.items()}
    if dataclasses.is_dataclass(cls):
        return _dataclass_from(cls, data, [] if unknown is None else unknown, where)
    if cls is float and isinstance(data, int):
        return float(data)
    return data


def _dataclass_from(cls: Any, data: dict, unknown: list[str], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    lacking = [name for name in required if name not in data]
    if lacking:
        raise MissingFieldError(f"no field {', '.join(_path(where, n) for n in lacking)} ({cls.__name__})")
    known = {f.name for f in fields}
    unknown.extend(_path(where, k) for k in data if k not in known and _path(where, k) not in unknown)
    return cls(**{k: from_jsonable(hints[k], v, unknown, _path(where, k)) for k, v in data.items() if k in known})


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def dumps(obj: Any) -> bytes:
    return orjson.dumps(to_jsonable(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # several ranks may write the same file at once
    tmp.write_bytes(dumps(obj))
    tmp.replace(path)


def read_json(path: Path, cls: type[T]) -> T:
    """A file diagnose wrote; a damaged one (cut short by a full disk, edited by hand, another version's) is the
    user's to know about, named, not a traceback."""
    unknown: list[str] = []
    try:
        record = from_jsonable(cls, orjson.loads(path.read_bytes()), unknown)
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError) as exc:
        raise UserError(f"cannot read {path}: {exc}",
                        "the file is damaged or was written by another version of diagnose; run again") from None
    if unknown:
        warnings.warn(UnknownFieldsWarning(
            f"{path} has field(s) this version of diagnose does not read, ignored: {', '.join(unknown[:8])}"
            f"{f' and {len(unknown) - 8} more' if len(unknown) > 8 else ''} (written by another version of diagnose?)"),
            stacklevel=2)
    return record
