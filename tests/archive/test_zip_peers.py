"""ZIPs where readers have disagreed: each class built here and read by both engines.

One end-record rule, end records checked against each other and against the directory,
data descriptors checked, and what zipfile or Go read (LZMA, base-0 offsets, a ZIP64
signature inside a name, 2^32-1 bytes without ZIP64) read here too.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
from helpers import zip_cases as zc
from helpers.archives import CountingSource

from cdml_edge.archive import (
    ArchiveError,
    CorruptArchiveError,
    TruncatedArchiveError,
    open_archive,
)
from cdml_edge.archive.source import FileSource

pytestmark = pytest.mark.usefixtures("engine")


def _zipfile(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_last_end_record_with_a_comment_past_the_end_is_refused() -> None:
    data = zc.truncated_comment()
    assert list(_zipfile(data)) == ["one.txt"]  # zipfile takes the last record; Go refuses
    with pytest.raises(CorruptArchiveError, match="comment .* runs past the end"):
        open_archive(data)  # never an earlier record's archive ("zero.txt")


def test_end_signature_cut_short_is_refused() -> None:
    with pytest.raises(zipfile.BadZipFile):
        _zipfile(zc.cut_end_signature())
    with pytest.raises(TruncatedArchiveError, match="cut short"):
        open_archive(zc.cut_end_signature())


def test_zip64_entry_count_beyond_the_directory_is_refused() -> None:
    data = zc.stdlib_zip({"a.txt": b"a\n"})
    with open_archive(zc.with_zip64_end(data)) as arc:  # the same records, sane count: read
        assert arc.read("a.txt") == b"a\n"
    with pytest.raises(CorruptArchiveError, match="declares 18446744073709551615 entries"):
        open_archive(zc.with_zip64_end(data, count=2**64 - 1))


def test_end_records_that_disagree_are_refused() -> None:
    data = zc.stdlib_zip({"a.txt": b"a\n"})
    with pytest.raises(CorruptArchiveError, match="end records disagree"):
        open_archive(zc.with_zip64_end(data, offset_shift=1))


def test_entry_count_mismatch_is_refused() -> None:
    with pytest.raises(CorruptArchiveError, match="holds 2 entries, the end record declares 1"):
        open_archive(zc.count_mismatch())


@pytest.mark.parametrize("signature", [True, False])
def test_data_descriptor_crc_is_checked(signature: bool) -> None:
    good = zc.descriptor_right(signature)
    with open_archive(good) as arc:
        assert arc.read_many(["dd.txt", "after.txt"]) == list(_zipfile(good).values())
    bad = zc.descriptor_crc_altered(signature)
    assert _zipfile(bad)["dd.txt"] == b"streamed member\n"  # zipfile ignores the descriptor
    with open_archive(bad) as arc:
        assert arc.read("ok.txt") == b"fine\n"
        with pytest.raises(CorruptArchiveError, match="data descriptor CRC-32") as err:
            arc.read("dd.txt")
        assert err.value.member == "dd.txt"
        with pytest.raises(CorruptArchiveError, match="data descriptor CRC-32"):
            arc.read_many(["ok.txt", "dd.txt"])
        assert arc.verify() == ["dd.txt"]


def test_lzma_members_read_through_the_standard_library() -> None:
    members = {"a.csv": b"t,v\n" + b"1,2\n" * 500, "b.bin": bytes(range(256)) * 9, "e": b""}
    data = zc.stdlib_zip(members, method=zipfile.ZIP_LZMA)
    with open_archive(data) as arc:
        assert arc.info("a.csv").method == "lzma"
        assert arc.read_many(list(members)) == list(members.values())
        assert arc.read("b.bin") == members["b.bin"]
    broken = bytearray(data)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("a.csv")
    broken[info.header_offset + 30 + len("a.csv") + info.compress_size // 2] ^= 0xFF
    with open_archive(bytes(broken)) as arc, pytest.raises(CorruptArchiveError):
        arc.read_many(list(members))


def test_zip64_locator_signature_inside_a_name_is_a_name() -> None:
    with open_archive(zc.zip64_locator_in_name()) as arc:  # Go reads it; so does this reader
        assert arc.names() == ["a.txt", "namePK\x06\x07" + "-" * 16]
        assert arc.read("a.txt") == b"a\n"
    data = zc.zip64_locator_in_extra()
    with open_archive(data) as arc:
        assert dict(zip(arc.names(), arc.read_many(arc.names()), strict=True)) == _zipfile(data)


def test_offsets_from_base_zero_when_the_directory_is_there() -> None:
    with open_archive(zc.base0_offsets()) as arc:  # Go's rule (zipfile refuses this file)
        assert arc.read_many(["a.txt", "b.txt"]) == [b"alpha\n", b"beta\n"]


def test_largest_size_without_a_zip64_extra_opens() -> None:
    data = zc.max_size_without_zip64()
    assert zipfile.ZipFile(io.BytesIO(data)).getinfo("big.bin").file_size == 2**32 - 1
    with open_archive(data) as arc:
        assert arc.info("big.bin").size == 2**32 - 1
        with pytest.raises(ArchiveError):
            arc.read("big.bin")  # declares 4 GiB, holds 1 byte


@pytest.mark.parametrize("where", ["memory", "file", "remote"])
def test_data_descriptor_checked_from_every_source(tmp_path: Path, where: str) -> None:
    """Each way the C core reads (in memory, ``pread`` on a file, fetched buffers)."""
    bad = zc.descriptor_crc_altered(signature=False)
    path = tmp_path / "dd.zip"
    path.write_bytes(bad)
    source: object = {
        "memory": bad,
        "file": path,
        "remote": CountingSource(FileSource(path)),
    }[where]
    with open_archive(source) as arc:  # type: ignore[arg-type]
        assert arc.read_many(["ok.txt"]) == [b"fine\n"]
        with pytest.raises(CorruptArchiveError, match="data descriptor CRC-32"):
            arc.read("dd.txt")
        with pytest.raises(CorruptArchiveError, match="data descriptor CRC-32"):
            arc.read_many(["dd.txt", "ok.txt"])
    missing = zc.entry_zip([(b"dd.txt", b"flagged, no descriptor\n", 8)], descriptor=b"")
    with open_archive(missing) as arc, pytest.raises(CorruptArchiveError, match="descriptor"):
        arc.read("dd.txt")  # what follows the data is the central directory (Go refuses too)


@pytest.mark.parametrize("same_length", [True, False])
@pytest.mark.parametrize("where", ["memory", "file", "remote", "pickled"])
def test_local_header_name_must_be_the_central_one(
    tmp_path: Path, where: str, same_length: bool
) -> None:
    data = zc.local_name_differs(same_length)
    with zipfile.ZipFile(io.BytesIO(data)) as zf, pytest.raises(zipfile.BadZipFile):
        zf.read("b.txt")  # zipfile refuses it too; Go and unzip read the central name
    path = tmp_path / "names.zip"
    path.write_bytes(data)
    source: object = {"memory": data, "remote": CountingSource(FileSource(path))}.get(where, path)
    arc = open_archive(source)  # type: ignore[arg-type]
    if where == "pickled":
        arc = pickle.loads(pickle.dumps(arc))
    with arc:
        assert arc.names() == ["a.txt", "b.txt"] and arc.read("a.txt") == b"alpha\n"
        with pytest.raises(CorruptArchiveError, match="local header") as err:
            arc.read("b.txt")
        assert err.value.member == "b.txt"
        with pytest.raises(CorruptArchiveError, match="local header"):
            arc.read_many(["a.txt", "b.txt"])
        assert arc.verify() == ["b.txt"]
