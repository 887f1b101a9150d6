"""Tar and tar.zst as other writers make them: each class built here, read by both engines.

Compared with :mod:`tarfile` (and ``pyzstd``) where they are right; where a peer reads a
header Go rejects, ours refuses with a typed error naming the archive.
"""

from __future__ import annotations

import io
import struct
import tarfile

import pytest
import zstandard
from helpers import tar_cases as tc

from cdml_edge.archive import (
    CorruptArchiveError,
    UnsupportedArchiveError,
    open_archive,
    pack,
)

pytestmark = pytest.mark.usefixtures("engine")


def _tarfile_members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}  # type: ignore[union-attr]


def test_gnu_incremental_times_are_not_a_name_prefix() -> None:
    data = tc.gnu_incremental()
    with open_archive(data) as arc:
        assert arc.names() == ["file.txt"]  # GNU tar and Go: the GNU header has no prefix
        assert arc.read("file.txt") == b"hello\n"


@pytest.mark.parametrize("extension_blocks", [False, True])
def test_old_gnu_sparse_is_expanded(extension_blocks: bool) -> None:
    data = tc.old_gnu_sparse(extension_blocks)
    peer = _tarfile_members(data)
    assert peer["sparse.bin"] == tc.sparse_content(tc.old_gnu_sparse_runs(extension_blocks))
    with open_archive(data) as arc:
        assert arc.names() == ["sparse.bin", "after.txt"]
        assert arc.info("sparse.bin").size == tc.SPARSE_SIZE
        assert arc.read("after.txt") == peer["after.txt"]
        assert arc.read("sparse.bin") == peer["sparse.bin"]
        assert arc.read_many(["after.txt", "sparse.bin"]) == [peer["after.txt"], peer["sparse.bin"]]
        assert dict(arc) == peer and arc.verify() == []


@pytest.mark.parametrize("form", ["0.0", "0.1", "1.0"])
def test_pax_sparse_is_expanded_under_its_name(form: str) -> None:
    data = tc.pax_sparse(form)
    peer = _tarfile_members(data)
    assert peer["sparse.bin"] == tc.sparse_content()
    with open_archive(data) as arc:
        assert arc.names() == ["sparse.bin", "after.txt"]  # never GNUSparseFile.0/...
        assert arc.info("sparse.bin").size == tc.SPARSE_SIZE
        assert arc.read_many(["after.txt", "sparse.bin"]) == [peer["after.txt"], peer["sparse.bin"]]
        assert arc.read("sparse.bin") == tc.sparse_content()


@pytest.mark.parametrize("form", ["0.1", "1.0"])
def test_sparse_tar_zst_is_expanded(form: str) -> None:
    data = zstandard.ZstdCompressor().compress(tc.pax_sparse(form))
    with open_archive(data) as arc:
        assert arc.format == "tar.zst"
        assert arc.read("sparse.bin") == tc.sparse_content()
        assert arc.read("after.txt") == tc.AFTER[1]
    frames = tc.seekable_tar_zst(tc.pax_sparse(form), frame=1024)
    with open_archive(frames) as arc:
        assert arc.seekable and arc.read("sparse.bin") == tc.sparse_content()


def test_sparse_of_an_unknown_format_is_refused_by_name() -> None:
    with open_archive(tc.pax_sparse("2.0")) as arc:
        assert arc.names() == ["sparse.bin", "after.txt"]
        with pytest.raises(UnsupportedArchiveError, match="format pax 2.0") as err:
            arc.read_many(["after.txt", "sparse.bin"])
        assert err.value.member == "sparse.bin"
        assert arc.read("after.txt") == tc.AFTER[1]


def test_sparse_map_that_does_not_add_up_is_corrupt() -> None:
    with pytest.raises(CorruptArchiveError, match="do not add up"):
        open_archive(tc.old_gnu_sparse(False, stored_extra=10))


def test_sparse_member_held_to_the_limits() -> None:
    from cdml_edge.archive import MemberTooLargeError

    with open_archive(tc.pax_sparse("1.0"), max_member_bytes=10_000) as arc:
        assert arc.read("after.txt") == tc.AFTER[1]
        with pytest.raises(MemberTooLargeError):
            arc.read("sparse.bin")  # 1,312 bytes stored, 65,536 served


def test_links_and_devices_are_named_as_skipped() -> None:
    with open_archive(tc.links_and_devices()) as arc:
        assert arc.names() == ["data/a.txt", "data/hard"]  # a hard link: its target's bytes
        assert arc.read("data/hard") == arc.read("data/a.txt") == b"alpha\n"
        skipped = arc.skipped()
        assert set(skipped) == {"data/link", "dev/null", "dev/fifo"}
        assert skipped["data/link"] == "symbolic link to 'a.txt'"
        assert skipped["dev/null"] == "character device"
        assert skipped["dev/fifo"] == "FIFO"


@pytest.mark.parametrize("kind", [b"1", b"2", b"5"])
def test_links_and_directories_carry_no_data_whatever_their_size(kind: bytes) -> None:
    """A size on a header-only entry: Go, tarfile and bsdtar read the next header there."""
    entry = tc.header(b"d/" if kind == b"5" else b"link", 512, kind, link=b"a.txt")
    data = tc.entry(b"a.txt", b"a") + entry + tc.entry(b"hidden.txt", b"surprise") + tc.END
    peer = _tarfile_members(data)
    assert list(peer) == ["a.txt", "hidden.txt"]
    with open_archive(data) as arc:
        linked = ["link"] if kind == b"1" else []  # a hard link: a member, a.txt's bytes
        assert arc.names() == ["a.txt", *linked, "hidden.txt"]
        assert [arc.read(n) for n in linked] == [b"a" for _ in linked]
        assert arc.read("hidden.txt") == b"surprise"


def test_duplicate_tar_names_are_reported() -> None:
    data = tc.duplicate_names()
    with open_archive(data) as arc:
        assert arc.duplicates() == ["a.txt"]
        assert arc.names() == ["b.txt", "a.txt"]
        assert arc.read("a.txt") == _tarfile_members(data)["a.txt"] == b"last\n"


@pytest.mark.parametrize("case", sorted(tc.BAD_PAX))
def test_pax_records_go_rejects_are_refused(case: str) -> None:
    with pytest.raises(CorruptArchiveError, match="pax record") as err:
        open_archive(tc.bad_pax(case))
    assert err.value.archive == "<memory>"


def test_global_pax_header_that_renames_members_is_refused() -> None:
    renames = tc.pax(tc.pax_record(b"path", b"evil.txt"), b"g")
    data = renames + tc.entry(b"a.txt", b"a") + tc.entry(b"b.txt", b"b") + tc.END
    assert list(_tarfile_members(data)) == ["evil.txt"]  # tarfile and GNU tar rename both
    with pytest.raises(CorruptArchiveError, match="global pax header sets 'path'"):
        open_archive(data)  # Go and bsdtar list a.txt, b.txt: refused rather than either
    comment = tc.pax(tc.pax_record(b"comment", b"0123abcd"), b"g")  # as `git archive` writes
    with open_archive(comment + tc.entry(b"a.txt", b"a") + tc.END) as arc:
        assert arc.names() == ["a.txt"]


def test_dangling_long_name_is_corrupt() -> None:
    with pytest.raises(CorruptArchiveError, match="not followed by a member"):
        open_archive(tc.dangling_long_name())


@pytest.mark.parametrize("edit", ["extra", "empty", ""])
def test_seek_table_checked_against_the_frames(edit: str) -> None:
    stream, members = tc.member_stream()
    data = tc.seekable_tar_zst(stream, edit=edit)
    # what `zstd -dc | tar` reads
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    assert _tarfile_members(plain.read()) == members
    with open_archive(data) as arc:
        assert arc.format == "tar.zst" and arc.seekable
        assert arc.names() == list(members)
        assert arc.read_many(list(members)) == list(members.values())
        assert [arc.read(n) for n in reversed(members)] == list(members.values())[::-1]
        assert (arc.seek_table_problem is not None) == (edit != "")


def test_pyzstd_refuses_the_extra_entry_too() -> None:
    pyzstd = pytest.importorskip("pyzstd")
    stream, _ = tc.member_stream()
    with pytest.raises(pyzstd.SeekableFormatError):
        pyzstd.SeekableZstdFile(io.BytesIO(tc.seekable_tar_zst(stream, edit="extra")))


def _insert_seek_entry(data: bytes, entry: tuple[int, int]) -> bytes:
    count, desc, _ = struct.unpack_from("<LBL", data, len(data) - 9)
    assert desc == 0
    start = len(data) - 9 - 8 * count - 8
    entries = [struct.unpack_from("<LL", data, start + 8 + 8 * k) for k in range(count)]
    entries.insert(1, entry)
    return data[:start] + tc.seek_table(entries)


def test_our_index_with_a_forged_seek_table_entry_is_refused() -> None:
    items = [(f"f{k}.txt", bytes([k]) * 20_000) for k in range(4)]
    data = pack(items, format="tar.zst")
    with pytest.raises(CorruptArchiveError, match="0 compressed bytes"):
        open_archive(_insert_seek_entry(data, (0, 1000)))
    with pytest.raises(CorruptArchiveError, match="seek table"):
        open_archive(_insert_seek_entry(data, (40, 1000)))


def test_zstd_stream_of_nothing_is_corrupt_but_an_empty_tar_is_not() -> None:
    with pytest.raises(CorruptArchiveError, match="empty tar stream"):
        open_archive(zstandard.ZstdCompressor().compress(b""))
    empty_tar = io.BytesIO()
    tarfile.open(fileobj=empty_tar, mode="w").close()
    with open_archive(zstandard.ZstdCompressor().compress(empty_tar.getvalue())) as arc:
        assert arc.names() == []


def test_our_index_checksums_catch_frames_swapped_with_their_entries() -> None:
    """A seek table consistent with its frames but pointing members at other bytes."""
    items = [(f"f{k}.bin", bytes([65 + k]) * 12_000) for k in range(3)]
    data = pack(items, format="tar.zst")
    count, _, _ = struct.unpack_from("<LBL", data, len(data) - 9)
    start = len(data) - 9 - 8 * count - 8
    entries = [struct.unpack_from("<LL", data, start + 8 + 8 * k) for k in range(count)]
    assert entries[0][1] == entries[1][1]  # one member per frame, the same sizes
    offs = [sum(c for c, _ in entries[:k]) for k in range(count)]
    frames = [data[offs[k] : offs[k] + entries[k][0]] for k in range(2)]
    body = frames[1] + frames[0] + data[offs[2] : start]
    swapped = body + tc.seek_table([entries[1], entries[0], *entries[2:]])
    with open_archive(swapped) as arc:
        assert arc.read("f2.bin") == items[2][1]
        with pytest.raises(CorruptArchiveError, match="CRC-32 mismatch") as err:
            arc.read("f0.bin")
        assert err.value.member == "f0.bin"
        assert sorted(arc.verify()) == ["f0.bin", "f1.bin"]


def test_header_checksum_signed_or_unsigned() -> None:
    """Old tars summed the header as signed bytes; both sums are accepted, nothing else."""
    from cdml_edge.archive.tar.format import header_ok

    info = tarfile.TarInfo("caf\u00e9-\u00fc.bin")  # UTF-8: bytes over 127 in the name
    block = bytearray(info.tobuf(format=tarfile.USTAR_FORMAT))[:512]
    rest = bytes(block[:148] + block[156:512])
    unsigned = sum(rest) + 256
    signed = unsigned - 256 * sum(b > 127 for b in rest)
    assert signed != unsigned
    for total, ok in ((unsigned, True), (signed, True), (unsigned + 1, False)):
        block[148:156] = b"%06o\x00 " % total
        assert header_ok(bytes(block)) is ok


def test_header_sum_is_the_byte_sum() -> None:
    """The checksum summed in pieces by Adler-32 equals the plain byte sum, extremes too."""
    import random

    from cdml_edge.archive.tar.format import header_sum

    rnd = random.Random(7)
    blocks = [bytes(512), b"\xff" * 512, *(rnd.randbytes(512) for _ in range(500))]
    for block in blocks:
        assert header_sum(block) == sum(block[:148]) + sum(block[156:512]) + 256
