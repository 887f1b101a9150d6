"""The file a replay or export writes: checked before the work, named when writing fails.

A long run should not end on an output it could have refused at once (a folder where the
file goes, a file where its folder goes), and a write that fails (a full disk) names the
file it was writing, not a temporary name or no name at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from cdml_edge.retrain.errors import OptionError

# What :mod:`cdml_edge.fsio.atomic` writes an output in until it is renamed over it: a
# private folder (``staged_path``: ``.tmp-XXXXXXXX.stage``, mode 0700) or a file
# (``atomic_writer``: ``.tmp-XXXXXXXX<suffix>``, mode 0600), XXXXXXXX eight of ``a-z0-9_``
# (``tempfile``). Removed when the writer fails; left when its process is killed.
_TEMP = r"\.tmp-[a-z0-9_]{8}"
#: a temporary nothing was written in for this long is a killed writer's
STALE_AFTER_S = 600.0


def check_out(path: Path, option: str) -> None:
    """:class:`OptionError` when ``path`` (given as ``option``) cannot be written as a file.

    That is when it is a folder, or when one of the folders above it is a file.
    """
    if path.is_dir():
        raise OptionError(f"{path}: a folder; {option} is the file to write")
    for parent in path.parents:
        if parent.is_dir():
            return
        if parent.exists() or parent.is_symlink():
            raise OptionError(f"{parent}: not a folder, so {path} cannot be written ({option})")


def check_not_ring_file(path: Path, ring: Path, option: str) -> None:
    """:class:`OptionError` when ``path`` names a file the retention folder ``ring`` owns.

    A window's archive or sidecar (or their temporary names), the catalog, in the ring or
    its ``corrupt/``: an output written there replaced a retained window (or the catalog).
    Other names in the ring folder (``train.zip``) are the user's and taken.
    """
    from cdml_edge.fsio import TMP_PREFIX
    from cdml_edge.store.catalog import CATALOG_FILES
    from cdml_edge.store.sidecar import CORRUPT_DIR, ring_name

    name = path.name
    bare = name[len(TMP_PREFIX) :] if name.startswith(TMP_PREFIX) else name
    if ring_name(bare) is None and name not in CATALOG_FILES:
        return
    for folder in (ring, ring / CORRUPT_DIR):
        with contextlib.suppress(OSError):  # a folder not there yet is not the ring's
            if os.path.samefile(path.parent, folder):
                raise OptionError(
                    f"{path}: a file of the retention folder {ring}; {option} would replace "
                    "it (give another name)"
                )


def cannot_write(path: Path, exc: OSError) -> str:
    """Why writing ``path`` failed, naming it (``exc``: the error of the write)."""
    return f"{path}: cannot write: {exc.strerror or exc}"


def sweep_stale_temps(
    folder: Path, suffixes: Sequence[str] = (), now: float | None = None
) -> list[str]:
    """Remove what killed writers left in ``folder``; one line per temporary removed.

    A writer killed (``kill -9``, the OOM killer, a power cut) leaves its staging folder
    (and the partial file in it) or its temporary file (one of ``suffixes``, e.g.
    ``.jsonl``). Removed only when it is one: this user's, under the name the writer
    gives, mode 0700 (a folder of regular files only) or 0600 (a file), nothing in it
    changed for :data:`STALE_AFTER_S` (a writer at work changes its file all the time).
    """
    now = time.time() if now is None else now
    files = "|".join(re.escape(x) for x in suffixes)
    pattern = re.compile(_TEMP + (rf"(\.stage|{files})" if files else r"(\.stage)"))
    names: list[str] = []  # none when the folder cannot be listed (or is not there yet)
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        names = sorted(e.path for e in entries if pattern.fullmatch(e.name))
    removed: list[str] = []
    for path in names:
        parts = _stale_parts(path, now)
        if parts is None:
            continue
        try:
            size = sum(os.lstat(f).st_size for f in parts)
            for f in parts:
                os.unlink(f)
            if path.endswith(".stage"):
                os.rmdir(path)
        except OSError:
            continue
        removed.append(f"{path}: removed, {size} bytes left by a writer killed while writing")
    return removed


def _stale_parts(path: str, now: float) -> list[str] | None:
    """The files to remove for the temporary ``path`` if a killed writer left it, else None."""
    try:
        st = os.lstat(path)
        folder = stat.S_ISDIR(st.st_mode)
        files = [os.path.join(path, n) for n in os.listdir(path)] if folder else [path]
        stats = [os.lstat(f) for f in files]
    except OSError:
        return None
    mode = 0o700 if folder else 0o600
    if st.st_uid != os.getuid() or st.st_mode & 0o777 != mode:
        return None
    if not all(stat.S_ISREG(s.st_mode) for s in stats):
        return None
    newest = max([st.st_mtime, *(s.st_mtime for s in stats)])
    return files if now - newest >= STALE_AFTER_S else None


__all__ = [
    "STALE_AFTER_S",
    "cannot_write",
    "check_not_ring_file",
    "check_out",
    "sweep_stale_temps",
]
