"""Damaged windows: a sidecar rebuilt from its archive, or the pair moved to ``corrupt/``.

A damaged sidecar (unparsable, or naming an archive other than its own) never causes a
deletion. :func:`salvage_sidecar` rebuilds it from the ``manifest.json`` inside its archive
(the results are then lost and the sidecar says so: ``results_lost``), moving the damaged
original to ``corrupt/``; if the archive cannot give its manifest either, the pair is moved
to ``corrupt/``. Files in ``corrupt/`` count towards the ring's bounds and are evicted by age
like windows (:func:`corrupt_files`). ``corrupt/`` is used only when it is a real folder:
one that is a link (to a folder elsewhere) is never listed, moved into or deleted from
(:class:`~cdml_edge.store.ondisk.RetentionError`), and links inside it are never followed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from cdml_edge.fsio import fsync_dir
from cdml_edge.store.files import commit, tmp_path, write_file
from cdml_edge.store.ondisk import RetentionError, open_subdir, read_regular
from cdml_edge.store.sidecar import (
    ARCHIVE_SUFFIXES,
    CORRUPT_DIR,
    SIDECAR_SUFFIX,
    ArchiveRef,
    RetainedWindow,
    window_stem,
)
from cdml_edge.window.manifest import MANIFEST_NAME, WindowManifest

log = logging.getLogger(__name__)


def salvage_sidecar(
    directory: Path,
    sidecar: str,
    names: set[str],
    damage: Exception,
    *,
    fsync: bool,
    mode: int = 0o600,
    limit: int = 1 << 40,
) -> RetainedWindow | None:
    """Rebuild the damaged ``sidecar`` from its archive's manifest, else move the pair away.

    ``names``: the files in ``directory``; ``damage``: why the sidecar could not be used;
    ``limit``: the largest archive read. Returns the rebuilt sidecar, or None when the window
    was moved to ``corrupt/``; :class:`RetentionError` when ``corrupt/`` is not a real folder.
    """
    stem = sidecar[: -len(SIDECAR_SUFFIX)]
    archives = [stem + sfx for sfx in ARCHIVE_SUFFIXES.values() if stem + sfx in names]
    for fmt, sfx in ARCHIVE_SUFFIXES.items():
        name = stem + sfx
        if name not in archives:
            continue
        rebuilt = _rebuild(directory, name, fmt, stem, limit)
        if rebuilt is None:
            continue
        tmp = tmp_path(directory, sidecar)
        try:
            write_file(tmp, rebuilt.to_bytes(), fsync=fsync, mode=mode)
            # the damaged original stays in place, linked into corrupt/ for inspection, until
            # the rebuilt one replaces it: a crash in between leaves the window as it was
            if not link_into_corrupt(directory, sidecar, fsync=fsync):
                move_to_corrupt(directory, [sidecar], fsync=fsync)  # no hard links here
            commit(directory, [(tmp, directory / sidecar)], fsync=fsync)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        log.warning(
            "retention: sidecar %s rebuilt from %s (results lost): %s", sidecar, name, damage
        )
        return rebuilt
    log.warning("retention: window %s is damaged, moved to %s/: %s", stem, CORRUPT_DIR, damage)
    move_to_corrupt(directory, [sidecar, *archives], fsync=fsync)
    return None


def _rebuild(directory: Path, name: str, fmt: str, stem: str, limit: int) -> RetainedWindow | None:
    """The sidecar of archive ``name`` from its own manifest; None when it gives none."""
    from cdml_edge.archive import open_archive

    try:
        data = read_regular(directory / name, limit)
        with open_archive(data) as arc:
            m = WindowManifest.from_bytes(arc.read(MANIFEST_NAME), where=name)
    except Exception as err:  # any damage: fall through to corrupt/
        log.warning("retention: %s gives no manifest: %s", name, err)
        return None
    if window_stem(m) != stem or m.archive_format != fmt:
        log.warning("retention: manifest of %s names another window", name)
        return None
    ref = ArchiveRef(file=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    return RetainedWindow(archive=ref, manifest=m, results_lost=True)


def move_to_corrupt(directory: Path, names: Iterable[str], *, fsync: bool) -> None:
    """Move ``names`` (those that exist) into ``corrupt/``, never over an earlier file.

    :class:`RetentionError` (nothing moved) when ``corrupt/`` is a link or not a folder.
    """
    with _corrupt_dir(directory) as fd:
        for name in names:
            src = directory / name
            if os.path.lexists(src):  # a link is moved as the link itself
                os.replace(src, _free_name(name, fd), dst_dir_fd=fd)
    if fsync:
        fsync_dir(directory)


def link_into_corrupt(directory: Path, name: str, *, fsync: bool) -> bool:
    """Hard-link ``name`` into ``corrupt/`` (never over an earlier file), leaving it in place.

    ``False`` when the file system has no hard links (FAT, some mounts); nothing done then.
    :class:`RetentionError` when ``corrupt/`` is a link or not a folder.
    """
    with _corrupt_dir(directory) as fd:
        try:
            dst = _free_name(name, fd)
            os.link(directory / name, dst, dst_dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                return False
            raise
    if fsync:
        fsync_dir(directory / CORRUPT_DIR)
    return True


@contextlib.contextmanager
def _corrupt_dir(directory: Path) -> Iterator[int]:
    """``corrupt/`` (made if missing), opened as a real folder: its descriptor."""
    qdir = directory / CORRUPT_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(qdir, 0o700)
    fd = open_subdir(qdir)
    if fd is None:
        raise RetentionError(qdir, "vanished while used")
    try:
        yield fd
    finally:
        os.close(fd)


def _free_name(name: str, dir_fd: int) -> str:
    """``name``, or ``name.1``, ``name.2``...: the first that nothing in ``dir_fd`` holds."""
    dst, i = name, 0
    while _lexists_at(dst, dir_fd):
        i += 1
        dst = f"{name}.{i}"
    return dst


def _lexists_at(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def corrupt_files(directory: Path) -> list[tuple[float, Path, int]]:
    """Regular files in ``corrupt/``: ``(mtime, path, size)`` (links inside are not followed).

    :class:`RetentionError` when ``corrupt/`` is a link or not a folder.
    """
    qdir = directory / CORRUPT_DIR
    fd = open_subdir(qdir)
    if fd is None:
        return []
    out = []
    try:
        for e in os.scandir(fd):
            try:
                if e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out.append((st.st_mtime, qdir / e.name, st.st_size))
            except OSError:
                continue
    finally:
        os.close(fd)
    return out


def remove_corrupt(directory: Path, name: str) -> None:
    """Delete the file ``name`` in ``corrupt/`` (never through a link to another folder)."""
    fd = open_subdir(directory / CORRUPT_DIR)
    if fd is None:
        return
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)
