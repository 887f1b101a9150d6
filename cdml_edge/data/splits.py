"""Split exports (``train/<class>/...``, ``val/...``, ``test/...``): the classes of each split.

A training export made with ``--split`` holds each class in each split only when the hash
of its items put some there; a small export can leave a class out of one. A class missing
from ``train/`` cannot be learnt (its ``val/`` items make training fail), one missing from
``val/`` is not measured. :func:`split_gaps` names both (torch-free: ``export`` uses it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SPLIT_NAMES = ("train", "val", "test")


def classes_by_split(names: Iterable[str]) -> dict[str, set[str]] | None:
    """``{split: classes}`` when every member is ``<split>/<class>/...``, else ``None``."""
    out: dict[str, set[str]] = {}
    for name in names:
        parts = name.split("/")
        if parts[-1] == "" or name == "manifest.json":
            continue
        if len(parts) < 3 or parts[0] not in SPLIT_NAMES:
            return None
        out.setdefault(parts[0], set()).add(parts[1])
    return out if "train" in out else None


@dataclass(frozen=True)
class SplitGap:
    """A class present in some split of an export and absent from ``missing_from``."""

    label: str
    missing_from: str
    present_in: tuple[str, ...]

    @property
    def unlearnable(self) -> bool:
        """Missing from ``train/``: a model trained on it cannot predict the class."""
        return self.missing_from == "train"

    def message(self) -> str:
        """One line naming the class, the split it lacks and the way out."""
        where = ", ".join(f"{s}/" for s in self.present_in)
        what = (
            "a model trained on train/ cannot learn it"
            if self.unlearnable
            else f"its accuracy on {self.missing_from}/ is not measured"
        )
        return (
            f"class {self.label!r} is in {where} but not in {self.missing_from}/: {what}; "
            "export more of its windows (an earlier --since) or another --split"
        )


def split_gaps(by_split: Mapping[str, set[str]]) -> list[SplitGap]:
    """Each class missing from a split the export has (``train/`` first)."""
    every = set().union(*by_split.values()) if by_split else set()
    return [
        SplitGap(label, split, tuple(s for s in SPLIT_NAMES if label in by_split.get(s, ())))
        for split in SPLIT_NAMES
        if split in by_split
        for label in sorted(every - by_split[split])
    ]


def archive_split_gaps(path: str | os.PathLike[str]) -> list[SplitGap]:
    """:func:`split_gaps` of the archive at ``path`` (none when it is not a split export)."""
    from cdml_edge.archive import open_archive

    with open_archive(path) as arc:
        by_split = classes_by_split(arc.names())
    return split_gaps(by_split) if by_split else []


__all__ = ["SPLIT_NAMES", "SplitGap", "archive_split_gaps", "classes_by_split", "split_gaps"]
