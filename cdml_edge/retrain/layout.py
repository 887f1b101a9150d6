"""Member names of a training archive: ``[split/]class/<stem>_<id12><ext>``.

The split of an item is decided by hashing its id, so the same items always land in the
same split; labels that would make an unsafe class folder (a separator, a hidden name)
give no member name, and such items are skipped.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Sequence

from cdml_edge.archive.names import is_safe_member_name
from cdml_edge.data.splits import SPLIT_NAMES
from cdml_edge.retrain.errors import ExportError
from cdml_edge.retrain.filters import plain_number
from cdml_edge.window.manifest import ManifestItem


def split_of(item_id: str, split: Sequence[float]) -> str:
    """Deterministic split from a hash of the item id (fractions of train/val[/test])."""
    h = int.from_bytes(hashlib.sha256(b"split\x00" + item_id.encode()).digest()[:8], "big")
    u = h / 2**64
    acc = 0.0
    for name, frac in zip(SPLIT_NAMES, split, strict=False):
        acc += frac
        if u < acc:
            return name
    return SPLIT_NAMES[len(split) - 1]


def parse_split(text: str) -> tuple[float, ...]:
    """``0.8/0.1/0.1`` (or ``0.9/0.1``, or percentages ``80/10/10``) -> fractions.

    Each part is a finite number as the configuration writes them: ``nan`` (which passed
    the sum check, every comparison with it being false), ``inf`` and ``1_0`` are refused.
    """
    numbers = [plain_number(x.strip()) for x in text.replace(",", "/").split("/")]
    parts = [x for x in numbers if x is not None]
    if len(parts) != len(numbers):
        raise ExportError(f"--split {text!r}: expected fractions like 0.8/0.1/0.1")
    if not 2 <= len(parts) <= 3 or any(x < 0 for x in parts):
        raise ExportError(f"--split {text!r}: give 2 or 3 non-negative parts (train/val[/test])")
    total = sum(parts)
    if abs(total - 100.0) <= 1e-6:
        parts = [x / 100.0 for x in parts]  # 80/10/10
    elif abs(total - 1.0) > 1e-6:
        raise ExportError(
            f"--split {text!r}: the parts add up to {total:g}; fractions must add up to 1 "
            "(0.8/0.1/0.1) or percentages to 100 (80/10/10)"
        )
    return tuple(parts)


def class_folder_ok(label: str) -> bool:
    """A label usable as one class folder: no separators, not hidden, not ``.``/``..``."""
    return (
        bool(label)
        and len(label) <= 128
        and not label.startswith(".")
        and not any(c in label for c in "/\\\x00")
        and label.strip() == label
    )


def member_name(label: str, item: ManifestItem, split: str | None) -> str | None:
    """``[split/]label/<stem>_<id12><ext>``; ``None`` when that would be unsafe."""
    if not class_folder_ok(label) or not is_safe_member_name(item.name):
        return None
    base = posixpath.basename(item.name.replace("\\", "/"))
    if not base or base.startswith("."):
        return None
    stem, ext = posixpath.splitext(base)
    name = f"{label}/{stem}_{item.id[:12]}{ext.lower()}"
    if split is not None:
        name = f"{split}/{name}"
    return name if is_safe_member_name(name) else None
