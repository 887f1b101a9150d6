"""Member names: the one normal form every reader serves, and names that could escape.

Archives packed the most common way name their members ``./cls/0001.png``
(``tar -cf x.tar -C folder .``) and some writers leave repeated slashes (``a//b``).
:func:`normalize_member_names` turns those into ``cls/0001.png`` and ``a/b``; every reader
(ZIP and tar, tar.zst, both engines) serves its members under the normal names, so labels,
``include`` filters, export and scan see one name per member whatever wrote the archive.
"""

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


def normalize_member_name(name: str) -> str:
    """``./a//b/./c.png`` -> ``a/b/c.png``: ``.`` parts and empty parts are dropped.

    What would change the meaning is kept: a leading ``/`` (an absolute, unsafe name stays
    visible to :func:`is_safe_member_name`), ``..`` parts, and a trailing ``/`` (a
    directory). A name with nothing left (``./``, ``.``) is returned as it is.

    >>> normalize_member_name("./cls//0001.png")
    'cls/0001.png'
    >>> normalize_member_name("/./etc/../x")
    '/etc/../x'
    """
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        return name
    lead = "/" if name.startswith("/") else ""
    trail = "/" if name.endswith("/") else ""
    return lead + "/".join(parts) + trail


def normalize_member_names(names: list[str]) -> list[str]:
    r"""Every name in normal form; ``names`` itself (no copy) when all already are.

    The check runs in C over the names joined as ``/name1\0/name2\0``, where a name
    in need of it shows ``//`` or ``/./`` or ends in ``/.``: two scans for archives
    without dot files (every archive :func:`~cdml_edge.archive.pack` writes), two more
    with them. Only an archive that needs it pays for the per-name pass.
    """
    joined = "/" + "\x00/".join(names) + "\x00"
    if "//" not in joined and (
        "/." not in joined or ("/./" not in joined and "/.\x00" not in joined)
    ):
        return names
    return [normalize_member_name(n) for n in names]
