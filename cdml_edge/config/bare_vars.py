"""A path that names a variable without braces (``$HOME/incoming``): refused, saying ``${HOME}``.

Only ``${VAR}`` and ``${VAR:-default}`` are taken from the environment (see
:func:`cdml_edge.config.loading.substitute_env`); ``$HOME/incoming`` stayed as written and
made a folder named ``$HOME`` beside the configuration. :func:`bare_variables` finds such a
``$NAME`` (a ``$`` then a letter or ``_``) in the values of path fields (every field typed
as a path, and ``output.jsonl``) as written in the file, before substitution (a value taken
from the environment is used as it is), so that the loader reports it as it reports an unset
``${VAR}``: one problem naming the field, with every other problem of the file. A ``$``
anywhere else (``price$5``, a password, a camera URL) is left alone.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import PurePath
from typing import Any

from cdml_edge.config.schema import AppConfig, is_model_class

_BARE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
"""``$NAME``: a ``$`` not followed by ``{``."""

_TEXT_PATHS = {("output", "jsonl")}
"""Fields that hold a path but are typed as text (``output.jsonl`` may also be ``-``)."""


def bare_variables(data: Any, loc: tuple[int | str, ...] = ()) -> list[tuple[str, str]]:
    """``(field path, problem)`` for each path value of ``data`` naming ``$NAME`` bare.

    ``data``: the parsed YAML tree, before ``${VAR}`` substitution.
    """
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in bare_variables(v, (*loc, str(k)))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in bare_variables(v, (*loc, i))]
    if not isinstance(data, str) or not _BARE.search(data) or not _is_path_field(loc):
        return []
    names = list(dict.fromkeys(m.group(1) for m in _BARE.finditer(data)))
    fixed = _BARE.sub(lambda m: "${" + m.group(1) + "}", data)
    listed = ", ".join(f"${name}" for name in names)
    return [
        (
            _field_path(loc),
            f"{data!r}: {listed} would be taken literally, as a name (only ${{NAME}} is "
            f"replaced from the environment): write {fixed}",
        )
    ]


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _is_path_field(loc: tuple[int | str, ...]) -> bool:
    """Whether the value at ``loc`` is a path (by the field's type in :class:`AppConfig`)."""
    if tuple(p for p in loc if isinstance(p, str)) in _TEXT_PATHS:
        return True
    annotation: Any = AppConfig
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return False
    return any(isinstance(t, type) and issubclass(t, PurePath) for t in _members(annotation))


def _step(annotation: Any, part: int | str) -> Any:
    """The type of the value at ``part`` inside a value of type ``annotation``."""
    for member in _members(annotation):
        origin = typing.get_origin(member)
        if is_model_class(member) and isinstance(part, str):
            field = member.model_fields.get(part)
            return field.annotation if field is not None else None
        if origin is list and isinstance(part, int):
            return typing.get_args(member)[0]
        if origin is dict and isinstance(part, str):
            return typing.get_args(member)[1]
    return None


def _members(annotation: Any) -> list[Any]:
    """The types a value of ``annotation`` may have (unions and ``Annotated`` unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


__all__ = ["bare_variables"]
