"""tar and tar.zst: :data:`TAR_ZST` and :data:`TAR` describe them to :mod:`..formats`.

:mod:`.format` holds tar headers, :mod:`.seekable` the zstd seekable format and our member
index, :mod:`.stream` sequential reads, :mod:`.read` plain tar and what tars share,
:mod:`.zst` tar.zst, :mod:`.frames` frame-by-frame reads (:mod:`.native`: in C,
:mod:`.cache`: decoded frames kept), :mod:`.write` the seekable tar.zst writer. Plain tar
is read only.
"""

from __future__ import annotations

from cdml_edge.archive.spec import (
    RANK_HEADER,
    RANK_LAST,
    RANK_MAGIC,
    RANK_TAIL,
    ArchiveFormat,
    Probe,
)
from cdml_edge.archive.tar import format as tarfmt
from cdml_edge.archive.tar import seekable
from cdml_edge.archive.tar.read import TarArchive
from cdml_edge.archive.tar.write import write_tar_zst
from cdml_edge.archive.tar.zst import ZstdTarArchive


def _seek_table_ends_file(probe: Probe) -> bool:
    return seekable.has_footer(probe.tail)


def _starts_with_zstd_frame(probe: Probe) -> bool:
    head = probe.head
    return head[:4] == seekable.ZSTD_MAGIC or seekable.is_skippable(head)


def _starts_with_tar_header(probe: Probe) -> bool:
    return tarfmt.header_ok(probe.head)


def _only_zero_blocks(probe: Probe) -> bool:
    """An empty tar: zero blocks only, two at least (``tar -cf e.tar -T /dev/null``)."""
    return tarfmt.only_zero_blocks(probe.source, probe.head)


TAR_ZST = ArchiveFormat(
    name="tar.zst",
    title="tar.zst",
    archive=ZstdTarArchive,
    tests=((RANK_TAIL, _seek_table_ends_file), (RANK_MAGIC, _starts_with_zstd_frame)),
    write=write_tar_zst,
    suffixes=(".tar.zst", ".tzst", ".tar.zstd"),
    aliases=("tzst",),
)
TAR = ArchiveFormat(
    name="tar",
    title="tar",
    archive=TarArchive,
    tests=((RANK_HEADER, _starts_with_tar_header), (RANK_LAST, _only_zero_blocks)),
)

__all__ = ["TAR", "TAR_ZST", "TarArchive", "ZstdTarArchive"]
