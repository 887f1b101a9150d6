"""A tar archive's member index, as the archive serves it and as it travels between processes.

:class:`TarRows` holds the member columns (:class:`~.seekable.MemberIndex`), the member
table built over them and, for a seekable tar.zst, the frame table. A pickled tar or
tar.zst archive carries it as compact arrays (one per column, the names as one NUL-joined
string), so a DataLoader worker neither reads the member index again nor walks the stream.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cdml_edge.archive.names import has_dir_names, normalize_member_names
from cdml_edge.archive.tar.seekable import FrameTable, MemberIndex
from cdml_edge.archive.tar.sparse import SparseMap


@dataclass
class TarRows:
    """Member columns, the served names (``names``) and name -> row (``ids``), frames.

    ``dups``: names more than one entry carries; ``skipped``: entries that are not files
    (links, devices), name -> reason.
    """

    index: MemberIndex
    names: list[str]
    ids: dict[str, int]
    frames: FrameTable | None = None
    data_end: int = 0
    dups: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        index: MemberIndex,
        frames: FrameTable | None = None,
        data_end: int = 0,
        skipped: dict[str, str] | None = None,
    ) -> TarRows:
        """Names in normal form; directories are left out.

        A later copy of a name wins, as with ``tar -x``.
        """
        if (normal := normalize_member_names(index.names)) is not index.names:
            index = dataclasses.replace(index, names=normal)  # ./a, a//b -> a, a/b
        names = index.names
        ids = dict(zip(names, range(len(names)), strict=True))
        dups: list[str] = []
        if len(ids) != len(names):
            dups = [n for n, c in Counter(names).items() if c > 1 and not n.endswith("/")]
        if len(ids) != len(names) or has_dir_names(names):
            keep = {i for n, i in ids.items() if not n.endswith("/")}
            names = [n for i, n in enumerate(names) if i in keep]
            ids = {n: ids[n] for n in names}
        return cls(index, names, ids, frames, data_end, dups, dict(skipped or {}))

    def __reduce__(self) -> tuple[Any, ...]:
        x = self.index
        blob = "\x00".join(x.names)
        names: Any = blob if blob.count("\x00") == max(len(x.names) - 1, 0) else list(x.names)
        crcs: Any = list(x.crcs)
        if all(c is not None for c in crcs):
            crcs = array("L", crcs)
        elif all(c is None for c in crcs):
            crcs = None
        cols = (
            array("Q", x.header_offsets),
            array("Q", x.data_offsets),
            array("Q", x.sizes),
            array("d", x.mtimes),
        )
        f = self.frames
        frames = None if f is None else (array("Q", f.coff), array("Q", f.doff))
        extra = (
            (x.refused, self.skipped, x.sparse) if x.refused or self.skipped or x.sparse else None
        )
        return (_load, (names, len(x.names), cols, crcs, frames, self.data_end, extra))


def _load(
    names: Any,
    count: int,
    cols: tuple[array[Any], ...],
    crcs: Any,
    frames: tuple[array[Any], array[Any]] | None,
    data_end: int,
    extra: tuple[dict[int, str], dict[str, str], dict[int, SparseMap]] | None = None,
) -> TarRows:
    if not isinstance(names, list):
        names = names.split("\x00") if count else []
    heads, datas, sizes, mtimes = (c.tolist() for c in cols)
    if crcs is None:
        crcs = [None] * count
    elif isinstance(crcs, array):
        crcs = crcs.tolist()
    refused, skipped, sparse = extra if extra is not None else ({}, {}, {})
    index = MemberIndex(names, heads, datas, sizes, mtimes, crcs, refused, sparse)
    table = None if frames is None else FrameTable(frames[0].tolist(), frames[1].tolist())
    return TarRows.build(index, table, data_end, skipped)
