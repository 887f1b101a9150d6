"""Argument names of the cdmltrain 1.1.4 API accepted beside ours (see README, "Coming from
cdmltrain"). A seed name is an alias: the model's ``config`` keeps our name only, so a
checkpoint rebuilds the same model whichever spelling built it."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def pick(owner: str, name: str, ours: T | None, seed_name: str, seed: T | None) -> T | None:
    """The value given as ``name`` or as its seed alias ``seed_name`` (both: they must agree)."""
    if seed is None:
        return ours
    if ours is not None and ours != seed:
        raise TypeError(
            f"{owner}: {name}={ours!r} and its alias {seed_name}={seed!r} disagree; give one"
        )
    return seed


def required(owner: str, name: str, value: T | None, seed_name: str) -> T:
    """``value``, or a ``TypeError`` naming both spellings when neither was given."""
    if value is None:
        raise TypeError(f"{owner}: missing argument {name!r} (or its alias {seed_name!r})")
    return value
