"""Plain value names in ``--help``: ``--config FILE``, ``--count INTEGER``, never ``<list[Path]>``.

typer names an option's value by its Python annotation (``<path>``, ``<list[Path]>``) and
prints it after an argument's own name too (``DIR <str>``). :func:`use_plain_value_names`
makes the help show an option's metavar, or else click's name of its type in capitals, and
an argument by its name alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from typer.core import TyperArgument, TyperOption

_NAMES = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOLEAN"}


def _value_name(param: Any, ctx: Any) -> str | None:
    """An option's metavar, or its type in capitals: PATH, TEXT, INTEGER, [a|b]."""
    if param.metavar is not None:
        return str(param.metavar)
    desc = param.type_descriptor
    if desc.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices or ()) + "]"
    annotation = get_args(desc.annotation)[0] if desc.is_list else desc.annotation
    name = "PATH" if desc.is_path or annotation is Path else _NAMES.get(annotation, "VALUE")
    return f"{name}..." if param.nargs != 1 else name


def _no_value_name(param: Any, ctx: Any) -> str | None:
    return None  # an argument's name already says what it is


def use_plain_value_names() -> None:
    """Name values in ``--help`` as click does (once per process; idempotent)."""
    TyperOption.display_type_rich = _value_name  # type: ignore[method-assign, assignment]
    TyperArgument.display_type_rich = _no_value_name  # type: ignore[method-assign, assignment]


__all__ = ["use_plain_value_names"]
