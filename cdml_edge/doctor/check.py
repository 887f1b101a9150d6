"""One doctor check's outcome, and the guard that turns a crashing check into a failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    name: str
    ok: bool
    detail: str
    warn: bool = False
    """A caveat, not a failure: ``ok`` stays True and the exit status is unaffected."""

    def line(self, ascii_only: bool = False) -> str:
        """``✓ name: detail`` (``✗`` failed, ``!`` warning; ``OK``/``FAIL``/``WARN`` in ASCII)."""
        if self.warn:
            mark = "WARN" if ascii_only else "!"
        elif ascii_only:
            mark = "OK  " if self.ok else "FAIL"
        else:
            mark = "✓" if self.ok else "✗"
        return f"{mark} {self.name}: {self.detail}"


def guard(name: str, fn: Callable[[], Check]) -> Check:
    """``fn()``, or a failed check ``name`` naming the exception it raised."""
    try:
        return fn()
    except Exception as exc:  # a check that crashes is a failed check, with the reason
        return Check(name, False, f"{type(exc).__name__}: {exc}")
