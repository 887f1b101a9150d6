"""What one decode may cost, decided from the member's header before anything is decoded.

A :class:`DecodeLimits` bounds every decoder: image pixels, JPEG scans, seconds of audio,
decompressed bytes and table cells. A member whose header claims more is refused with a
:class:`~cdml_edge.decode.DecodeError` naming it, so a small file cannot make the process
allocate gigabytes or spend minutes of CPU (a 3 KB TIFF claiming 16000x16000 pixels, a
180 KB FLAC of an hour of silence, a 1 MB ``.npz`` of a gigabyte of zeros).

Decoders take ``limits=`` explicitly; without it they use the process's limits
(:func:`current_limits`), which the agent and replay set from the configuration's
``limits`` section (:func:`set_limits`). ``None`` in a field means no bound.

What a decode will allocate, as its header says, is also charged while it runs
(:func:`charged`) to whatever :func:`set_charge` installed: the agent installs its in-flight
byte budget, so intake pauses while a large decode is under way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from .errors import DecodeError

MIB = 1024 * 1024


@dataclass(frozen=True)
class DecodeLimits:
    """Per-member decode bounds (``None``: unbounded). See docs/reliability.md."""

    max_pixels: int | None = 40_000_000
    """Image width x height."""
    max_jpeg_scans: int | None = 32
    """Scans in one JPEG (each costs a pass over every block; encoders write at most ~20)."""
    max_audio_seconds: float | None = 600.0
    """Duration of one audio member, from its header (frames / sample rate)."""
    max_decoded_bytes: int | None = 256 * MIB
    """Bytes one decode may allocate: pixels x channels x sample size, audio samples as
    float32 before and after resampling, an array's decompressed size."""
    max_cells: int | None = 10_000_000
    """Values of one table or array (CSV cells, ``.npy`` elements, JSON values, text words)."""
    decode_deadline: float | None = 10.0
    """CPU seconds one isolated decode may take before its process is killed and the member
    refused (``None``: every decode in-process, no deadline). See :mod:`.isolation`."""
    isolate_decodes_over: int | None = 32 * MIB
    """Decodes that will allocate at least this many bytes run in a killable decoder process
    when :attr:`decode_deadline` is set (smaller ones cost less than the hand-over)."""

    @classmethod
    def of(cls, section: object) -> DecodeLimits:
        """The limits of a configuration's ``limits`` section (fields of the same names)."""
        names = cls.__dataclass_fields__
        return cls(**{k: getattr(section, k) for k in names if hasattr(section, k)})

    def check(self, member: str, what: str, value: float, limit: float | None, unit: str) -> None:
        """Raise :class:`DecodeError` when ``value`` is over ``limit``."""
        if limit is not None and value > limit:
            raise DecodeError(
                member, f"{what} is {_number(value)} {unit}, over the limit of {_number(limit)}"
            )

    def check_bytes(self, member: str, what: str, nbytes: int) -> None:
        """Refuse a decode that would allocate more than :attr:`max_decoded_bytes`."""
        self.check(member, what, nbytes, self.max_decoded_bytes, "bytes")

    def check_cells(self, member: str, what: str, cells: int) -> None:
        """Refuse a table or array of more than :attr:`max_cells` values."""
        self.check(member, what, cells, self.max_cells, "cells")


UNLIMITED = DecodeLimits(None, None, None, None, None, None, None)
"""No bound at all (trusted data only)."""

_current = DecodeLimits()


def current_limits() -> DecodeLimits:
    """The limits decoders use when none are given."""
    return _current


def set_limits(limits: DecodeLimits) -> DecodeLimits:
    """Make ``limits`` the process's default; the previous ones come back."""
    global _current
    previous, _current = _current, limits
    return previous


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


Charge = Callable[[int], None]
_charge: tuple[Charge, Charge] | None = None


def set_charge(take: Charge | None, give: Charge | None = None) -> None:
    """Charge every decode's bytes to ``take`` before it and ``give`` them back after.

    ``None`` removes the charge. ``take`` must not block (decodes run in pipeline workers).
    """
    global _charge
    _charge = None if take is None or give is None else (take, give)


_UNCHARGED = nullcontext()


def charged(nbytes: int) -> AbstractContextManager[None]:
    """Hold ``nbytes`` of the installed charge (if any) while the body decodes."""
    hooks = _charge
    if hooks is None or nbytes <= 0:
        return _UNCHARGED
    return _holding(hooks, nbytes)


@contextmanager
def _holding(hooks: tuple[Charge, Charge], nbytes: int) -> Iterator[None]:
    hooks[0](nbytes)
    try:
        yield
    finally:
        hooks[1](nbytes)
