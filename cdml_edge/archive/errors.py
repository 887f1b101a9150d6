"""Typed archive errors; each names the archive and, where known, the member.

They pickle with their fields (they cross DataLoader worker processes).
"""

from __future__ import annotations

from cdml_edge.errors import CdmlError


class ArchiveError(CdmlError):
    """Base class of every archive error: ``.archive`` and ``.member`` say where."""

    def __init__(self, message: str, *, archive: str | None = None, member: str | None = None):
        self.archive = archive
        self.member = member
        self.reason = message
        where = ": ".join(p for p in (archive, member) if p)
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.reason, self.archive, self.member))


def _rebuild(
    cls: type[ArchiveError], reason: str, archive: str | None, member: str | None
) -> ArchiveError:
    return cls(reason, archive=archive, member=member)


class CorruptArchiveError(ArchiveError):
    """Bytes that contradict the format: bad signature, checksum, size or compressed data."""


class TruncatedArchiveError(CorruptArchiveError):
    """The archive ends before a structure or member it declares."""


class UnsupportedArchiveError(ArchiveError):
    """A valid but unsupported format, compression method or feature."""


class UnsafeMemberError(ArchiveError):
    """A member name that would escape the target directory (``..``, absolute, drive)."""


class MemberTooLargeError(ArchiveError):
    """A member over ``max_member_bytes`` or over the allowed expansion ratio."""


class TooManyMembersError(ArchiveError):
    """An archive holding more entries than ``max_members`` (a member-count bomb)."""

    @classmethod
    def of(cls, archive: str, limit: int, found: str) -> TooManyMembersError:
        """The error of ``archive``, of ``found`` entries, over ``max_members=limit``."""
        return cls(
            f"{found} entries, over max_members={limit} (a member-count bomb, or an archive "
            "to open with a higher max_members)",
            archive=archive,
        )


class StreamTooLargeError(ArchiveError):
    """A compressed stream that expands past what ``max_ratio`` allows a whole archive.

    A decompression bomb met while the stream is walked (a tar.zst without a seek table is
    walked once at open) or copied, not while a member is read.
    """


class ArchiveChangedError(ArchiveError):
    """The archive file was replaced or changed after it was opened (its index is stale)."""
