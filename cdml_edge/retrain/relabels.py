"""Human labels for retained items, from a CSV given to ``cdml-edge export --labels``.

The CSV has a header row and a ``label`` column, plus ``id`` (the item id), or
``window_id`` + ``name``, or ``name`` alone; rows are matched in that order. An empty label
removes the item from the export.
"""

from __future__ import annotations

import csv
import io
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cdml_edge.archive.names import normalize_member_name
from cdml_edge.retrain.errors import ExportError
from cdml_edge.window.manifest import ManifestItem


@dataclass
class Relabels:
    """Human labels from a CSV: ``label`` plus ``id``, or ``window_id`` + ``name``, or ``name``.

    An empty label removes the item from the export.
    """

    by_id: dict[str, str] = field(default_factory=dict)
    by_window_name: dict[tuple[str, str], str] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)
    used: set[tuple[str, ...]] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.by_id) + len(self.by_window_name) + len(self.by_name)

    def lookup(self, item: ManifestItem, window_id: str) -> str | None:
        """The human label of ``item`` in window ``window_id``, or None; a match is marked used.

        Looked up by ``id``, then by ``window_id`` + ``name``, then by ``name``.
        """
        if item.id in self.by_id:
            self.used.add(("id", item.id))
            return self.by_id[item.id]
        key = (window_id, item.name)
        if key in self.by_window_name:
            self.used.add(("wn", *key))
            return self.by_window_name[key]
        if item.name in self.by_name:
            self.used.add(("name", item.name))
            return self.by_name[item.name]
        return None


def load_relabels(path: str | Path) -> Relabels:
    """Read a relabel CSV (header row required); :class:`ExportError` names file and row.

    An item given two different labels (by the same id, window and name, or name) is
    refused, naming both rows: the last row used to win, silently. A device is no CSV
    (``/dev/zero`` was read until memory ran out); a pipe (``--labels <(…)``) is one.
    """
    p = Path(path)
    try:
        if not _file_or_pipe(p):
            raise ExportError(f"{p}: cannot read relabel CSV: not a file")
        text = p.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ExportError(f"{p}: cannot read relabel CSV: {why}") from exc
    reader = csv.DictReader(io.StringIO(text))
    cols = {c.strip().lower(): c for c in (reader.fieldnames or [])}
    if "label" not in cols:
        raise ExportError(f"{p}: relabel CSV needs a 'label' column (and id, or window_id+name)")
    name_col = cols.get("name") or cols.get("item")
    if "id" not in cols and name_col is None:
        raise ExportError(f"{p}: relabel CSV needs an 'id' or a 'name' column")
    out = Relabels()
    given: dict[tuple[str, ...], tuple[int, str]] = {}  # each key -> its row and label
    for i, row in enumerate(reader, start=2):
        label = (row.get(cols["label"]) or "").strip()
        rid = (row.get(cols["id"]) or "").strip() if "id" in cols else ""
        name = normalize_member_name((row.get(name_col) or "").strip()) if name_col else ""
        wid = (row.get(cols["window_id"]) or "").strip() if "window_id" in cols else ""
        if rid:
            key: tuple[str, ...] = ("id", rid)
            out.by_id[rid] = label
        elif name and wid:
            key = ("window_id+name", wid, name)
            out.by_window_name[(wid, name)] = label
        elif name:
            key = ("name", name)
            out.by_name[name] = label
        else:
            raise ExportError(f"{p}: row {i}: neither id nor name given")
        first, was = given.setdefault(key, (i, label))
        if was != label:
            raise ExportError(
                f"{p}: row {i} labels {' '.join(key)} {label!r}, row {first} {was!r}; "
                "keep one of them"
            )
    return out


def _file_or_pipe(path: Path) -> bool:
    """Whether ``path`` is a regular file or a pipe (OSError when it cannot be looked at)."""
    mode = path.stat().st_mode
    return stat.S_ISREG(mode) or stat.S_ISFIFO(mode)
