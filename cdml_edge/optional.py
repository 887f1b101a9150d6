"""An optional part (a C extension, a faster library) imported once, with its off switch."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def native_off() -> bool:
    """Whether ``CDML_EDGE_NATIVE=0`` turns the C parts off (the Python paths give the same)."""
    return os.environ.get("CDML_EDGE_NATIVE", "1") == "0"


class OptionalPart(Generic[T]):
    """What ``load`` gives, loaded at the first :meth:`get` and kept; ``None`` while ``off()``.

    ``load`` returns ``None`` or raises ``ImportError`` where the part is missing; either is
    remembered, so a missing part costs one try per process.
    """

    def __init__(self, load: Callable[[], T | None], off: Callable[[], bool]) -> None:
        self._load = load
        self._off = off
        self._tried = False
        self._value: T | None = None

    def get(self) -> T | None:
        """The part, or ``None`` when it is switched off or missing."""
        if self._off():
            return None
        if not self._tried:
            self._tried = True
            try:
                self._value = self._load()
            except ImportError:
                self._value = None
        return self._value
