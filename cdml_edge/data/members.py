"""Passes over all member names at once: hidden members, modality by extension.

A dataset over a million members cannot afford a Python call per name when it is built.
These passes join the names with NUL (which no served name holds) and let one regular
expression or substring scan in C do the work; a list of names holding a NUL takes the
per-name path. Results equal the per-name definitions (:func:`is_hidden`,
:func:`cdml_edge.modality.modality_for`) name for name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Sequence

from cdml_edge.modality import EXTENSIONS, modality_for

_SEP = "\x00"


def is_hidden(name: str) -> bool:
    """A dot file or folder, or macOS resource-fork debris (``__MACOSX/``)."""
    return any(p.startswith(".") or p == "__MACOSX" for p in name.split("/"))


def _joined(names: Sequence[str]) -> str | None:
    """The names joined by NUL, or ``None`` when a name holds a NUL itself."""
    blob = _SEP.join(names)
    return blob if blob.count(_SEP) == max(len(names) - 1, 0) else None


def visible(names: list[str]) -> list[str]:
    """``names`` without hidden members (``names`` itself when none is hidden)."""
    blob = _joined(names)
    if blob is not None:
        wrapped = f"/{blob.replace(_SEP, _SEP + '/')}{_SEP}"
        if "/." not in wrapped and "/__MACOSX/" not in wrapped and "/__MACOSX\x00" not in wrapped:
            return names
    return [n for n in names if not is_hidden(n)]


@functools.lru_cache(maxsize=32)
def _extension_pattern(exts: tuple[str, ...]) -> re.Pattern[str]:
    """Whole names (between NULs) whose extension is one of ``exts``.

    The extension as ``posixpath.splitext`` finds it after lower-casing: a base name's leading
    dots start no extension.
    """
    alts = "|".join(re.escape(e[1:]) for e in sorted(exts, key=len, reverse=True))
    return re.compile(
        rf"(?:(?<=\x00)|^)((?:[^\x00]*/)?\.*[^\x00/.][^\x00/]*\.(?:{alts}))(?=\x00|$)",
        re.ASCII | re.IGNORECASE,
    )


def _ending_count(blob: str, exts: tuple[str, ...]) -> int | None:
    """How many names end in one of ``exts`` (ASCII case folded, as ``str.lower`` folds them).

    ``None`` when a base name may be only dots and an extension (then it has no extension)
    and the caller must look closer.
    """
    low = (_SEP + blob + _SEP).encode("utf-8", "surrogateescape").lower()
    total = 0
    for e in exts:
        end = e.encode("ascii") + b"\x00"
        found = low.count(end)
        if found and (b"/" + end in low or b"\x00" + end in low or b"." + end in low):
            return None
        total += found
    return total


def with_modality(names: list[str], keep: Collection[str]) -> list[str]:
    """The names whose :func:`~cdml_edge.modality.modality_for` is in ``keep``, in order.

    ``names`` itself when all of them are.
    """
    blob = _joined(names)
    if blob is None:
        return [n for n in names if modality_for(n) in keep]
    if not names:
        return names
    if "binary" not in keep:
        exts = tuple(e for m in keep for e in EXTENSIONS.get(m, ()))
        if not exts:
            return []
        if _ending_count(blob, exts) == len(names):  # the usual case: every name is kept
            return names
        return list(_extension_pattern(exts).findall(blob))
    others = tuple(e for m, es in EXTENSIONS.items() if m not in keep for e in es)
    if not others or _ending_count(blob, others) == 0:
        return names
    excluded = set(_extension_pattern(others).findall(blob))
    return [n for n in names if n not in excluded]
