"""A ZIP archive's parsed index, as the archive serves it and as it travels between processes.

:class:`ZipRows` holds the central directory once parsed (the C core's entry array, or the
Python path's entries) with the member names. A pickled :class:`~.archive.ZipArchive`
carries it as compact arrays: the C entry array as one ``bytes`` (or, for the Python path,
one array per column) and the names as one NUL-joined string, so a DataLoader worker reads
members without fetching or parsing the central directory again.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from cdml_edge.archive.names import has_dir_names
from cdml_edge.archive.zip.format import Entry

# Entry columns after the name: offset, csize, usize, crc, method, flags, mtime, hdr_extra
_COLUMN_TYPES = ("Q", "Q", "Q", "L", "H", "H", "d", "L")


@dataclass
class ZipRows:
    """Rows of the central directory and the member table built over them.

    ``row_names[i]`` is the (normal-form) name of row ``i``; ``names`` the members served
    (directories left out, a repeated name once, at its first position), ``ids`` name ->
    row (the last row of a repeated name), ``dups`` the names more than one row carries.
    Exactly one of ``native`` (a :class:`~.native.ZipIndex`) and ``entries`` is used;
    ``raw_names``: with ``entries``, each row's name bytes as the central directory has
    them (a local header must carry the same).
    """

    row_names: list[str]
    native: Any = None
    entries: list[Entry] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    dups: list[str] = field(default_factory=list)
    raw_names: list[bytes] = field(default_factory=list)

    @classmethod
    def build(
        cls, row_names: list[str], native: Any, entries: list[Entry], ndirs: int | None
    ) -> ZipRows:
        """The member table over parsed rows (``ndirs``: directory rows, when known)."""
        rows = cls(row_names, native, entries)
        names = row_names
        ids = dict(zip(names, range(len(names)), strict=True))
        if len(ids) == len(names) and (ndirs == 0 or (ndirs is None and not has_dir_names(names))):
            rows.names, rows.ids = names, ids  # the common case: no directories, no repeats
            return rows
        # a later entry of the same name wins (as with unzip); the first position is kept
        served = [n for i, n in enumerate(names) if not n.endswith("/") and ids[n] == i]
        first: dict[str, int] = {}
        for i, n in enumerate(names):
            first.setdefault(n, i)
        rows.names = sorted(served, key=first.__getitem__)
        rows.ids = {n: ids[n] for n in rows.names}
        rows.dups = [n for n, c in Counter(names).items() if c > 1 and not n.endswith("/")]
        return rows

    def __reduce__(self) -> tuple[Any, ...]:
        names = self.row_names
        blob = "\x00".join(names)
        packed: Any = blob if blob.count("\x00") == max(len(names) - 1, 0) else list(names)
        # the raw names travel only where they are not the served names' UTF-8 (most are)
        plain = (blob + "\x00").encode("utf-8", "surrogateescape") if names else b""
        if self.native is not None:
            state = self.native.state(with_names=self.native.names_blob() != plain)
            return (_load_native, (packed, len(names), state))
        cols = [array(t, _column(self.entries, k + 1)) for k, t in enumerate(_COLUMN_TYPES)]
        raws = None
        if b"".join(r + b"\x00" for r in self.raw_names) != plain:
            raws = (b"".join(self.raw_names), array("L", map(len, self.raw_names)))
        return (_load_python, (packed, len(names), cols, raws))


def _column(entries: list[Entry], k: int) -> list[Any]:
    return [e[k] for e in entries]


def _names(packed: Any, count: int) -> list[str]:
    if isinstance(packed, list):
        return packed
    return packed.split("\x00") if count else []


def _load_native(packed: Any, count: int, state: tuple[Any, ...]) -> ZipRows | None:
    """Rows over an unpickled C index (its raw names rebuilt from the names if not sent).

    ``None`` when it could not be rebuilt here, or the C core is turned off here: the
    archive is then opened from its source again, on this process's engine.
    """
    from cdml_edge.archive.native import module

    if module() is None:
        return None
    from cdml_edge.archive.zip.native import load_index

    names = _names(packed, count)
    native = load_index(*state)
    if native is None:
        return None
    if state[-1] is None:
        native.use_names(("\x00".join(names) + "\x00").encode("utf-8", "surrogateescape"))
    return ZipRows.build(names, native, [], native.ndirs)


def _load_python(
    packed: Any,
    count: int,
    cols: list[array[Any]],
    raws: tuple[bytes, array[int]] | None = None,
) -> ZipRows | None:
    """Rows of the Python path.

    ``None`` when the C core is on here: the receiving process reads on its own engine, so
    the archive is opened from its source again.
    """
    from cdml_edge.archive.native import module

    if module() is not None:
        return None
    names = _names(packed, count)
    entries: list[Entry] = list(zip(names, *(c.tolist() for c in cols), strict=True))
    rows = ZipRows.build(names, None, entries, None)
    if raws is None:  # the served names' UTF-8
        rows.raw_names = [n.encode("utf-8", "surrogateescape") for n in names]
    else:
        ends = list(accumulate(raws[1], initial=0))
        rows.raw_names = [raws[0][a:b] for a, b in zip(ends, ends[1:], strict=False)]
    return rows
