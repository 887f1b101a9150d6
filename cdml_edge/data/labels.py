"""Label resolution for archive members: class folders, a callable, or a name->label mapping.

No torch here. Labels are resolved once, when the dataset is built, so a lambda works
as ``labels=`` even with spawn-started DataLoader workers (only the results travel).
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from cdml_edge.archive.names import normalize_member_name
from cdml_edge.errors import CdmlError

LabelSource = Union[str, "os.PathLike[str]", Callable[[str], Any], Mapping[str, Any], None]


class LabelError(CdmlError, ValueError):
    """Labels could not be resolved; names the member or mapping at fault."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type[LabelError], tuple[str, str]]:
        # picklable across processes (DataLoader workers)
        return (type(self), (self.where, self.reason))


@dataclass
class Labels:
    """Resolved labels: the members kept, one target each, and the class vocabulary."""

    names: list[str]
    targets: list[Any]
    classes: list[str] = field(default_factory=list)
    class_to_idx: dict[str, int] = field(default_factory=dict)


def _common_dirs(names: Sequence[str]) -> int:
    """How many leading directory components every name shares."""
    prefix = posixpath.commonprefix(list(names)) if names else ""
    return prefix[: prefix.rfind("/") + 1].count("/")


def folder_labels(names: Sequence[str], classes: Sequence[str] | None = None) -> Labels:
    """ImageFolder semantics: the class is the first directory below the common root.

    ``cats/1.jpg`` and ``data/cats/1.jpg`` both give class ``cats`` (a single wrapping
    folder, as left by zipping a directory, is skipped); files directly in the root have no
    class and are left out, as ImageFolder does. Classes are sorted; indices follow that order.
    ``classes``: use this class list instead (e.g. the training set's for a validation set);
    a member in a folder not named in it raises :class:`LabelError`.
    """
    names = list(names)
    depth = _common_dirs(names)
    blob = "\x00".join(names)
    if names and blob.count("/") == depth * len(names) and depth > 0:
        depth -= 1  # everything sits in one folder: that folder is the one class
    found = _classes_at(names, blob, depth)
    if found is not None:
        kept, cls = names, found
    else:
        kept, cls = [], []
        for n in names:
            parts = n.split("/")
            if len(parts) - 1 > depth:
                kept.append(n)
                cls.append(parts[depth])
    if not kept:
        raise LabelError("labels='folder'", "no member sits in a class folder")
    _refuse_unsafe(names, blob, kept, cls)
    return _vocabulary(kept, cls, classes, "labels='folder'")


_NO_CLASS = frozenset({"", ".", ".."})


def _refuse_unsafe(names: list[str], blob: str, kept: list[str], cls: list[str]) -> None:
    """Refuse an absolute member, or one whose class folder is ``''``, ``.`` or ``..``.

    :class:`LabelError` names the first one (``/etc/x.jpg`` was a training item of class
    ``''``).
    """
    absolute = blob.startswith("/") or "\x00/" in blob
    if not absolute and not (_NO_CLASS & set(cls)):
        return
    bad = next((n for n in names if n.startswith("/")), None) if absolute else None
    if bad is None:
        bad = next(n for n, c in zip(kept, cls, strict=True) if c in _NO_CLASS)
    raise LabelError(
        f"member {bad!r}",
        "an absolute name or a class folder named '', '.' or '..': not a training item",
    )


def _refuse_climbing(archive_names: Sequence[str]) -> None:
    """Refuse an archive with a member that has a ``..`` part (``../x.jpg``, ``a/../../x``).

    Such a member is left out as hidden (a part starting with a dot) before labels are
    resolved, so :func:`_refuse_unsafe` never sees it; an archive that holds one is not laid
    out in class folders: :class:`LabelError` names the first.
    """
    wrapped = "/" + "/\x00/".join(archive_names) + "/"
    if "/../" not in wrapped:
        return
    bad = next((n for n in archive_names if ".." in n.split("/")), None)
    if bad is not None:
        raise LabelError(
            f"member {bad!r}",
            "a name with a '..' part climbs out of its folder: not a training item",
        )


def _classes_at(names: list[str], blob: str, depth: int) -> list[str] | None:
    """The folder ``depth`` levels down of every name, in one pass in C.

    ``None`` when a name sits above that level or holds a NUL (the caller goes name by name).
    """
    if not names or blob.count("\x00") != len(names) - 1:
        return None
    root = "".join(p + "/" for p in names[0].split("/")[:depth])  # every name starts so
    # each match takes a whole name, so the next one starts at a name: no anchor needed
    pattern = re.compile(rf"{re.escape(root)}([^\x00/]*)/[^\x00]*")
    found = pattern.findall(blob)
    return found if len(found) == len(names) else None


def parse_mapping(data: bytes, where: str) -> dict[str, Any]:
    """A ``name -> label`` mapping from JSON or a CSV.

    JSON: an object, or a list of ``[name, label]``; CSV: two columns ``name,label`` (header
    optional).
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LabelError(where, f"not UTF-8: {exc}") from exc
    if where.lower().endswith(".json"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LabelError(where, f"malformed JSON: {exc}") from exc
        except RecursionError as exc:
            raise LabelError(where, "JSON nested too deeply to parse") from exc
        except (MemoryError, ValueError) as exc:  # e.g. an integer of too many digits
            raise LabelError(where, f"JSON could not be parsed: {exc!r}") from exc
        if isinstance(obj, dict):
            return {str(k): v for k, v in obj.items()}
        if isinstance(obj, list) and all(isinstance(r, list) and len(r) == 2 for r in obj):
            return {str(k): v for k, v in obj}
        raise LabelError(where, "expected an object {name: label} or a list of [name, label]")
    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if r]
    except csv.Error as exc:  # a NUL byte, a field over the csv module's size limit
        raise LabelError(where, f"malformed CSV: {exc}") from exc
    if (
        rows
        and len(rows[0]) == 2
        and rows[0][0].strip().lower() in ("name", "file", "member", "filename", "path")
    ):
        rows = rows[1:]
    out: dict[str, Any] = {}
    for i, row in enumerate(rows, start=1):
        if len(row) != 2:
            raise LabelError(where, f"row {i} has {len(row)} fields, expected name,label")
        out[row[0].strip()] = _scalar(row[1].strip())
    return out


def _scalar(s: str) -> Any:
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def mapping_labels(
    names: Sequence[str],
    mapping: Mapping[str, Any],
    where: str,
    classes: Sequence[str] | None = None,
) -> Labels:
    """Keep the members the mapping names (by full name, else by its end, else by base name).

    Keys are matched in normal form (``./cat/1.jpg`` names member ``cat/1.jpg``). A key that
    is no member's full name names the one member whose name ends with it, folder by folder
    (``cat/1.jpg`` names ``pets/cat/1.jpg``), else the one member of its base name. A key
    that would name several members, or two keys that name one member with different
    labels, raise :class:`LabelError`: a label is never given to a member chosen at random.
    """
    present = set(names)
    by_base: _ByBase | None = None  # made at the first key that is no full name
    pairs: dict[str, Any] = {}
    named_by: dict[str, str] = {}
    for key, value in mapping.items():
        member = normalize_member_name(key)
        if member not in present:
            by_base = by_base or _ByBase(names)
            member = _member_for(member, key, by_base, where)
        if member in pairs and pairs[member] != value:
            raise LabelError(
                where,
                f"labels {named_by[member]!r} and {key!r} both name member {member!r}, "
                f"with different labels ({pairs[member]!r}, {value!r})",
            )
        pairs[member] = value
        named_by.setdefault(member, key)
    kept = [n for n in names if n in pairs]  # archive order
    if not kept:
        raise LabelError(where, "the mapping names no member of the dataset")
    return _vocabulary(kept, [pairs[n] for n in kept], classes, where)


class _ByBase:
    """Members by base name: one dict for the many held once, lists for the rest."""

    def __init__(self, names: Sequence[str]) -> None:
        self.once: dict[str, str] = {}
        self.more: dict[str, list[str]] = {}
        once, more = self.once, self.more
        for n in names:
            base = posixpath.basename(n)
            first = once.setdefault(base, n)
            if first is not n:
                more.setdefault(base, [first]).append(n)

    def get(self, base: str) -> list[str]:
        """The members named ``base`` (after the last ``/``), in archive order."""
        many = self.more.get(base)
        if many is not None:
            return many
        one = self.once.get(base)
        return [] if one is None else [one]


def _member_for(norm: str, key: str, by_base: _ByBase, where: str) -> str:
    """The one member a key that is no full member name names (see :func:`mapping_labels`).

    ``norm`` is ``key`` in normal form; ``by_base`` the members by base name.
    """
    same_base = by_base.get(posixpath.basename(norm))
    if len(same_base) == 1:  # its end or its base name: the one member either way
        return same_base[0]
    below = [n for n in same_base if n.endswith("/" + norm)] if "/" in norm else []
    found = below or same_base
    if len(found) == 1:
        return found[0]
    if not found:
        raise LabelError(where, f"labels member {key!r}, which is not in the archive")
    shown = ", ".join(repr(n) for n in found[:3]) + (", ..." if len(found) > 3 else "")
    raise LabelError(
        where,
        f"labels member {key!r}, which matches {len(found)} members ({shown}): "
        "give the member's full name",
    )


def callable_labels(
    names: Sequence[str], fn: Callable[[str], Any], classes: Sequence[str] | None = None
) -> Labels:
    """Label every member with ``fn(name)``; string labels become class indices.

    With ``classes``, a label outside them raises :class:`LabelError`.
    """
    return _vocabulary(list(names), [fn(n) for n in names], classes, "labels callable")


def _vocabulary(
    names: list[str], values: list[Any], classes: Sequence[str] | None, where: str
) -> Labels:
    """String labels become class indices; other labels stay as they are.

    The classes are the sorted label values, or ``classes`` when given: then a label
    outside it raises :class:`LabelError` naming the first such member.
    """
    if not values or not all(issubclass(t, str) for t in set(map(type, values))):
        return Labels(names, values)
    found = set(values)
    vocab = sorted(found) if classes is None else list(classes)
    idx = {c: i for i, c in enumerate(vocab)}
    if not found.issubset(idx):
        unknown = [(n, v) for n, v in zip(names, values, strict=True) if v not in idx]
        (member, value), more = unknown[0], len(unknown) - 1
        also = f" (and {more} more members)" if more else ""
        raise LabelError(
            where, f"{member!r} has class {value!r}, which is not in classes {vocab}{also}"
        )
    return Labels(names, list(map(idx.__getitem__, values)), vocab, idx)


def resolve_labels(
    labels: LabelSource,
    names: Sequence[str],
    read_member: Callable[[str], bytes],
    archive_names: Sequence[str],
    classes: Sequence[str] | None = None,
) -> Labels | None:
    """Resolve ``labels=`` against the dataset's members.

    ``"folder"``; a callable ``name -> label``; a mapping; or the name of a ``.csv`` /
    ``.json`` member of the archive (or, failing that, a local file) holding the mapping.
    ``classes``: the class list string labels index into (default: the sorted labels).
    """
    if labels is None:
        return None
    if callable(labels) and not isinstance(labels, (str, os.PathLike)):
        return callable_labels(names, labels, classes)
    if isinstance(labels, Mapping):
        return mapping_labels(names, labels, "labels mapping", classes)
    spec = os.fspath(labels)
    if spec == "folder":
        _refuse_climbing(archive_names)
        return folder_labels(names, classes)
    member = normalize_member_name(spec)
    if member in archive_names:
        data = read_member(member)
    elif os.path.isfile(spec):
        with open(spec, "rb") as fh:
            data = fh.read()
    else:
        raise LabelError(
            spec,
            "labels must be 'folder', a callable, a mapping, or a .csv/.json "
            "member of the archive or local file",
        )
    kept = [n for n in names if n != member]
    return mapping_labels(kept, parse_mapping(data, spec), spec, classes)
