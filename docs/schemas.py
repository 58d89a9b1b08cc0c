"""JSON Schema for the files diagnose writes (diagnosis.json, compare.json), from the dataclasses that define them.

The schema files in docs/reference/ are documentation kept by hand (descriptions, enums); this module made their
first version and gives the schema of a field that a new dataclass field needs, so that the failure of
tests/test_docs.py can say what to add:

    .venv/bin/python docs/schemas.py diagnosis Diagnosis.run_cost   # the schema to add for one field
    .venv/bin/python docs/schemas.py --write                        # write the files afresh (loses hand edits)
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "reference"
MODEL_SOURCE = Path(__file__).resolve().parent.parent / "diagnose" / "model.py"


def roots() -> dict:
    """Each written file's name -> (its dataclass, its schema file)."""
    from diagnose import model

    return {"diagnosis": (model.Diagnosis, REFERENCE / "diagnosis.schema.json"),
            "compare": (model.Comparison, REFERENCE / "compare.schema.json")}


def dataclasses_under(root: type) -> list[type]:
    """root and every dataclass its fields hold, however deep, in the order first met."""
    found: list[type] = []

    def visit(hint) -> None:
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            if hint in found:
                return
            found.append(hint)
            for value in typing.get_type_hints(hint).values():
                visit(value)
        for arg in typing.get_args(hint):
            visit(arg)

    visit(root)
    return found


def property_schema(hint) -> dict:
    """The JSON Schema of a value of type `hint`, as serial.py writes it."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = property_schema(options[0]) if len(options) == 1 else {}
        if list(inner) == ["type"] and isinstance(inner["type"], str):
            return {"type": [inner["type"], "null"]}
        return {"anyOf": [inner, {"type": "null"}]}
    if origin in (list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if origin is tuple and len(typing.get_args(hint)) > 1 and Ellipsis not in typing.get_args(hint):
            return {"type": "array", "prefixItems": [property_schema(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array", "items": property_schema(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        args = typing.get_args(hint)
        return {"type": "object", "additionalProperties": property_schema(args[1])} if args else {"type": "object"}
    if dataclasses.is_dataclass(hint):
        return {"$ref": f"#/$defs/{hint.__name__}"}
    simple = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return {"type": simple[hint]} if hint in simple else {}


def field_comments() -> dict[tuple[str, str], str]:
    """(class, field) -> the comment beside or above the field in diagnose/model.py: a first description."""
    comments: dict[tuple[str, str], str] = {}
    cls, above = "", []
    for line in MODEL_SOURCE.read_text().splitlines():
        if match := re.match(r"class (\w+)", line):
            cls, above = match.group(1), []
        elif match := re.match(r"    # (.*)", line):
            above.append(match.group(1))
        elif match := re.match(r"    (\w+): [^#]*(?:#\s*(.*))?$", line):
            text = " ".join(above + ([match.group(2)] if match.group(2) else []))
            if cls and text:
                comments[(cls, match.group(1))] = text
            above = []
        else:
            above = []
    return comments


def definition(cls: type, comments: dict) -> dict:
    hints = typing.get_type_hints(cls)
    properties = {}
    for f in dataclasses.fields(cls):
        schema = property_schema(hints[f.name])
        if (cls.__name__, f.name) in comments:
            schema = {"description": comments[(cls.__name__, f.name)], **schema}
        properties[f.name] = schema
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    doc = " ".join((cls.__doc__ or "").split())
    return {"type": "object", **({"description": doc} if doc and not doc.startswith(cls.__name__ + "(") else {}),
            "properties": properties, "required": required, "additionalProperties": False}


def skeleton(name: str) -> dict:
    root, _ = roots()[name]
    comments = field_comments()
    defs = {cls.__name__: definition(cls, comments) for cls in dataclasses_under(root)}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://diagnose.invalid/schema/{name}.schema.json",
            "title": f"{name}.json (schema 1)",
            "$ref": f"#/$defs/{root.__name__}", "$defs": defs}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"]:
        for name, (_, path) in roots().items():
            path.write_text(json.dumps(skeleton(name), indent=2) + "\n")
        return 0
    if len(argv) == 2 and "." in argv[1]:
        cls_name, field_name = argv[1].split(".", 1)
        print(json.dumps({field_name: skeleton(argv[0])["$defs"][cls_name]["properties"][field_name]}, indent=2))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
