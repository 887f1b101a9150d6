"""Argument names of the cdmltrain 1.1.4 API accepted beside ours (see docs/cdmltrain.md).

A cdmltrain name is an alias: the model's ``config`` keeps our name only, so a
checkpoint rebuilds the same model whichever spelling built it.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def pick(owner: str, name: str, ours: T | None, alias: str, theirs: T | None) -> T | None:
    """The value given as ``name`` or as its cdmltrain alias ``alias`` (both: they must agree)."""
    if theirs is None:
        return ours
    if ours is not None and ours != theirs:
        raise TypeError(
            f"{owner}: {name}={ours!r} and its alias {alias}={theirs!r} disagree; give one"
        )
    return theirs


def required(owner: str, name: str, value: T | None, alias: str) -> T:
    """``value``, or a ``TypeError`` naming both spellings when neither was given."""
    if value is None:
        raise TypeError(f"{owner}: missing argument {name!r} (or its alias {alias!r})")
    return value
