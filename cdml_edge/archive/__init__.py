"""Archives in, bytes out: ZIP, seekable tar.zst and tar, read and written.

No ML here (never imports torch or onnxruntime). See :func:`open_archive` and :func:`pack`.
Each format is a folder (``zip/``, ``tar/``) listed in :mod:`.formats`; bytes come from a
:class:`~cdml_edge.archive.source.ByteSource` (file, memory, ``s3/``).
"""

from cdml_edge.archive.arena import Arena
from cdml_edge.archive.base import Archive, MemberInfo
from cdml_edge.archive.errors import (
    ArchiveChangedError,
    ArchiveError,
    CorruptArchiveError,
    MemberTooLargeError,
    StreamTooLargeError,
    TooManyMembersError,
    TruncatedArchiveError,
    UnsafeMemberError,
    UnsupportedArchiveError,
)
from cdml_edge.archive.names import is_safe_member_name
from cdml_edge.archive.native import native_available
from cdml_edge.archive.pack import pack, write_archive
from cdml_edge.archive.reader import open_archive

__all__ = [
    "Archive",
    "ArchiveChangedError",
    "ArchiveError",
    "Arena",
    "CorruptArchiveError",
    "MemberInfo",
    "MemberTooLargeError",
    "StreamTooLargeError",
    "TooManyMembersError",
    "TruncatedArchiveError",
    "UnsafeMemberError",
    "UnsupportedArchiveError",
    "is_safe_member_name",
    "native_available",
    "open_archive",
    "pack",
    "write_archive",
]
