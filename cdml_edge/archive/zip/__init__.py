"""ZIP: :data:`ZIP` describes the format to :mod:`cdml_edge.archive.formats`.

:mod:`.format` holds the structures, :mod:`.read` the Python path, :mod:`.native` the C
path, :mod:`.archive` the :class:`ZipArchive` over either, :mod:`.write` the writer.
"""

from __future__ import annotations

from cdml_edge.archive.spec import RANK_LAST, RANK_MAGIC, RANK_TAIL, ArchiveFormat, Probe
from cdml_edge.archive.zip.archive import ZipArchive
from cdml_edge.archive.zip.format import HEAD_SIGS, find_eocd
from cdml_edge.archive.zip.write import write_zip


def _end_record_ends_file(probe: Probe) -> bool:
    return find_eocd(probe.tail, strict=True) >= 0


def _starts_with_signature(probe: Probe) -> bool:
    return probe.head[:4] in HEAD_SIGS


def _end_record_before_junk(probe: Probe) -> bool:
    return find_eocd(probe.tail) >= 0


ZIP = ArchiveFormat(
    name="zip",
    title="ZIP",
    archive=ZipArchive,
    tests=(
        (RANK_TAIL, _end_record_ends_file),
        (RANK_MAGIC, _starts_with_signature),
        (RANK_LAST, _end_record_before_junk),
    ),
    write=write_zip,
    suffixes=(".zip",),
)

__all__ = ["ZIP", "ZipArchive"]
