"""Member-name safety: names that could escape an extraction directory."""

from __future__ import annotations

import re

_DRIVE = re.compile(r"^[A-Za-z]:")


def is_safe_member_name(name: str) -> bool:
    """True when ``name`` is relative, has no ``..`` part, no drive letter and no NUL."""
    if not name or "\x00" in name:
        return False
    norm = name.replace("\\", "/")
    if norm.startswith("/") or _DRIVE.match(norm):
        return False
    return all(part != ".." for part in norm.split("/"))


def has_dir_names(names: list[str]) -> bool:
    """True when any name ends with ``/`` (a directory entry); one pass in C."""
    return "/\x00" in "\x00".join(names) + "\x00"
