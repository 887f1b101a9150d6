"""Scanning an archive: every member read and checked, unsafe names flagged."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cdml_edge.archive.base import MemberInfo
from cdml_edge.archive.errors import ArchiveError, UnsupportedArchiveError
from cdml_edge.archive.names import is_safe_member_name
from cdml_edge.archive.pack import format_for_path, write_archive
from cdml_edge.archive.reader import SourceLike, open_archive
from cdml_edge.fsio.names import display_name


@dataclass
class ScanReport:
    """What ``scan`` found: members, their total sizes, and every problem by name."""

    archive: str
    format: str
    members: list[MemberInfo] = field(default_factory=list)
    bad: dict[str, str] = field(default_factory=dict)  # name -> reason
    refused: dict[str, str] = field(default_factory=dict)  # name -> reason (e.g. sparse)
    skipped: dict[str, str] = field(default_factory=dict)  # links, devices: name -> what
    notes: list[str] = field(default_factory=list)  # what was read in spite of (a seek table)
    unsafe: list[str] = field(default_factory=list)
    unchecked: int = 0  # members without a stored checksum (plain tar, tar --zstd)
    engine: str = "python"

    @property
    def size(self) -> int:
        """Uncompressed bytes of all members."""
        return sum(m.size for m in self.members)

    @property
    def compressed_size(self) -> int:
        """Compressed bytes of all members."""
        return sum(m.compressed_size for m in self.members)

    @property
    def ratio(self) -> float:
        """Uncompressed over compressed size."""
        return self.size / max(self.compressed_size, 1)

    @property
    def ok(self) -> bool:
        """No bad, refused or unsafe members."""
        return not self.bad and not self.refused and not self.unsafe


def scan_archive(source: SourceLike) -> ScanReport:
    """Open ``source``, read every member (checksums checked) and report the problems."""
    with open_archive(source) as arc:
        report = ScanReport(
            archive=arc.name, format=arc.format, members=arc.infos(), engine=arc.engine
        )
        report.unsafe = [m.name for m in report.members if not is_safe_member_name(m.name)]
        report.unchecked = sum(1 for m in report.members if m.checksum is None)
        report.skipped = arc.skipped()
        problem = getattr(arc, "seek_table_problem", None)
        if problem:
            report.notes.append(problem)
        dups = set(arc.duplicates())
        for name in arc.verify():
            if name in dups:
                report.bad[name] = "duplicate member name (the last entry is read)"
                continue
            try:
                arc.read(name)
                report.bad[name] = "failed in a batch read"
            except UnsupportedArchiveError as exc:
                report.refused[name] = exc.reason
            except ArchiveError as exc:
                report.bad[name] = exc.reason
    return report


def shown(name: str) -> str:
    """``name`` as a line may show it: NUL, control and undecodable bytes escaped."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)


def unsafe_reason(name: str) -> str:
    """Why :func:`~cdml_edge.archive.names.is_safe_member_name` refuses ``name``."""
    if not name:
        return "empty name"
    if "\x00" in name:
        return f"NUL in the name (C-string readers see {name.split(chr(0), 1)[0]!r})"
    return "absolute, with a drive letter, or with a '..' part"


@dataclass
class FolderListing:
    """What :func:`list_folder` found: the files to pack and what it left out, by name."""

    files: list[tuple[str, Path]] = field(default_factory=list)  # (member name, path)
    skipped: dict[str, str] = field(default_factory=dict)  # name -> what it is

    def leave_out(self, path: str | os.PathLike[str], what: str) -> None:
        """Move the file at ``path`` (if listed) from the files to pack to ``skipped``."""
        try:
            target = os.stat(path)
        except OSError:
            return
        keep: list[tuple[str, Path]] = []
        for name, file in self.files:
            try:
                st = file.stat()
            except OSError:
                keep.append((name, file))
                continue
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                self.skipped[name] = what
            else:
                keep.append((name, file))
        self.files = keep


def list_folder(folder: str | os.PathLike[str]) -> FolderListing:
    """Every regular file under ``folder``, sorted by name, and what is not one.

    Member names are the relative POSIX paths as valid UTF-8: a byte of a name that is not
    UTF-8 is shown as ``%XX``, as the agent names its members. Links (to files or folders)
    are never followed; they, FIFOs, sockets and devices are listed as skipped.
    """
    root = Path(folder)
    out = FolderListing()
    for path in sorted(root.rglob("*")):
        name = display_name(path.relative_to(root).as_posix())
        what = _not_a_file(path)
        if what is None:
            out.files.append((name, path))
        elif what:
            out.skipped[name] = what
    return out


def _not_a_file(path: Path) -> str | None:
    """``None`` for a regular file, ``""`` for a folder, else what ``path`` is."""
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return ""
    kinds = {stat.S_ISLNK: "a symbolic link", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
    return next((what for test, what in kinds.items() if test(mode)), "a device")


def pack_dir(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    level: int = 3,
    on_file: Callable[[str, int], None] | None = None,
    listing: FolderListing | None = None,
) -> int:
    """Pack every regular file under ``folder`` into ``out`` (.zip or .tar.zst), atomically.

    ``listing``: what :func:`list_folder` gave (listed now when ``None``). ``on_file(name,
    size)`` is called as each file is read. Returns the archive size.
    """
    fmt = format_for_path(out)
    files = (listing or list_folder(folder)).files

    def items() -> Iterator[tuple[str, bytes]]:
        for name, path in files:
            data = path.read_bytes()
            if on_file is not None:
                on_file(name, len(data))
            yield name, data

    return write_archive(out, items(), format=fmt, level=level)
