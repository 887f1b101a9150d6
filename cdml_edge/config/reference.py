"""The configuration reference in Markdown, generated from the pydantic models.

The configuration page (``docs/config.md``) embeds the output of
:func:`config_reference_markdown`; a test checks that the two agree, so the documentation
cannot drift from the schema.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cdml_edge.config.schema import AppConfig, is_model_class
from cdml_edge.units import format_size, parse_duration, parse_size


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        base = args[0]
        meta = " ".join(type(m).__name__ for m in args[1:])
        if "BeforeValidator" in meta and base is int:
            return "size"
        if "BeforeValidator" in meta and base is float:
            return "duration"
        return _type_name(base)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map {_type_name(args[0])} → {_type_name(args[1])}"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "section"
        if issubclass(annotation, Path):
            return "path"
        return annotation.__name__
    return str(annotation)


def _unit_of(field: FieldInfo) -> str | None:
    for meta in field.metadata:
        func = getattr(meta, "func", None)
        if func is parse_size:
            return "size"
        if func is parse_duration:
            return "duration"
    name = _type_name(field.annotation)  # optional: ``Size | None``, ``Duration | None``
    return name if name in ("size", "duration") else None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("x-default"), str):
        return f"`{extra['x-default']}`"
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return ""
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, Path):
        return f"`{value}`"
    unit = _unit_of(field)
    if unit == "size" and isinstance(value, int):
        return f"`{format_size(value).replace('.0 ', '')}`"
    if unit == "duration" and isinstance(value, float):
        return f"`{value:g}s`"
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def _section_model(annotation: Any) -> type[BaseModel] | None:
    if is_model_class(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows: list[str] = []
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        sub = _section_model(field.annotation)
        kind = _unit_of(field) or _type_name(field.annotation)
        meaning = _cell(field.description or (sub.__doc__ or "" if sub is not None else ""))
        if sub is not None:
            container = typing.get_origin(field.annotation)
            is_list = container is list or "list of" in kind
            is_map = "map " in kind
            sub_prefix = f"{path}[]." if is_list else f"{path}.<key>." if is_map else f"{path}."
            label = "list of sections" if is_list else "map of sections" if is_map else "section"
            if _default(field) == "unset":
                label += " (optional)"
            rows.append(f"| `{path}` | {label} | {_default(field)} | {meaning} |")
            nested.append((sub_prefix, sub))
        else:
            rows.append(f"| `{path}` | {kind} | {_default(field)} | {meaning} |")
    for sub_prefix, sub in nested:
        rows.extend(_rows(sub, sub_prefix))
    return rows


def config_reference_markdown() -> str:
    """A Markdown table of every configuration key: type, default, meaning."""
    header = ["| key | type | default | meaning |", "|---|---|---|---|"]
    return "\n".join(header + _rows(AppConfig, "")) + "\n"
