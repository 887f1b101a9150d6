"""Our tar.zst member index is checked against the tar headers it points at.

The index (a skippable frame) says where each member's header and data lie; ``zstd -dc |
tar`` reads the headers. An index whose names were swapped once served each member under
the other's name (labels swapped silently) and ``verify()`` found nothing.
"""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest
import zstandard

from cdml_edge.archive import CorruptArchiveError, open_archive, pack

pytestmark = pytest.mark.usefixtures("engine")

LONG_A = "a/" + "x" * 120 + ".txt"
LONG_B = "a/" + "y" * 120 + ".txt"


def _swapped(data: bytes, a: str, b: str) -> bytes:
    """``data`` with the names ``a`` and ``b`` (same length) swapped in its member index."""
    raw_a, raw_b = a.encode(), b.encode()
    assert len(raw_a) == len(raw_b)
    i, j = data.rfind(raw_a), data.rfind(raw_b)  # the index frame is last but the seek table
    out = bytearray(data)
    out[i : i + len(raw_a)], out[j : j + len(raw_b)] = raw_b, raw_a
    return bytes(out)


def _tarfile(data: bytes) -> dict[str, bytes]:
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    with tarfile.open(fileobj=io.BytesIO(plain)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _sources(tmp_path: Path, data: bytes) -> list[str | bytes]:
    path = tmp_path / "swapped.tar.zst"
    path.write_bytes(data)
    return [str(path), data]


@pytest.mark.parametrize(
    ("a", "b"), [("cat/0001.txt", "dog/0001.txt"), (LONG_A, LONG_B)], ids=["ustar", "pax"]
)
def test_swapped_names_in_the_index_are_refused(tmp_path: Path, a: str, b: str) -> None:
    items = [("first.txt", b"1"), (a, b"meow"), (b, b"woof"), ("last.txt", b"9")]
    good = pack(items, format="tar.zst")
    bad = _swapped(good, a, b)
    assert _tarfile(bad) == dict(items)  # tar reads the headers: nothing moved there
    for src in _sources(tmp_path, bad):
        with open_archive(src) as arc:
            assert arc.read("first.txt") == b"1" and arc.read("last.txt") == b"9"
            for name in (a, b):
                with pytest.raises(CorruptArchiveError, match="tar header") as info:
                    arc.read(name)
                assert info.value.member == name
            with pytest.raises(CorruptArchiveError, match="tar header"):
                arc.read_many([a, "first.txt"])
            assert sorted(arc.verify()) == sorted([a, b])
        with open_archive(src) as arc:  # read_many first, then the one-member path
            with pytest.raises(CorruptArchiveError, match="tar header"):
                arc.read_many(["last.txt", b])
            with pytest.raises(CorruptArchiveError, match="tar header"):
                arc.read(b)


def test_swapped_names_of_members_of_other_sizes_are_refused(tmp_path: Path) -> None:
    """Two names of one length, two sizes: the index's sizes are the other header's."""
    items = [("a.bin", b"A" * 10), ("b.bin", b"B" * 700)]
    bad = _swapped(pack(items, format="tar.zst"), "a.bin", "b.bin")
    for src in _sources(tmp_path, bad):
        with open_archive(src) as arc:
            assert sorted(arc.verify()) == ["a.bin", "b.bin"]


def test_right_indexes_read_after_the_check(tmp_path: Path) -> None:
    """Names only a pax record holds, UTF-8, big members over several frames: read as packed."""
    items = [
        (LONG_A, b"long"),
        ("ü/ñame.txt", b"utf8"),
        ("big.bin", random.Random(0).randbytes(2_500_000)),
        ("empty", b""),
        ("z/" + "é" * 90, b"pax utf8"),
    ]
    data = pack(items, format="tar.zst", frame_bytes=4096)
    for src in _sources(tmp_path, data):
        for _ in range(2):  # the second time from the checked members
            with open_archive(src) as arc:
                assert {n: arc.read(n) for n in arc.names()} == dict(items)
                assert arc.read_many([n for n, _ in items]) == [d for _, d in items]
                assert arc.verify() == []


def test_a_seekable_copy_of_a_stock_tar_zst_with_pax_names_reads(tmp_path: Path) -> None:
    """A copy's index points at the header block after a pax record: its name field is cut.

    Names a ustar field cannot hold as they are (long, UTF-8) are believed from the index
    there; the size and the names a field holds are still checked.
    """
    items = {LONG_A: b"long", "ü/ñame.txt": b"utf8", "short.txt": b"s", "p/" + "q" * 99: b"q"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in items.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    stock = tmp_path / "stock.tar.zst"
    stock.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    copy = tmp_path / "copy.tar.zst"
    with open_archive(str(stock)) as arc, copy.open("wb") as out:
        arc.write_seekable_copy(out)  # type: ignore[attr-defined]
    with open_archive(str(copy)) as arc:
        assert {n: arc.read(n) for n in arc.names()} == items
        assert arc.verify() == []
    data = copy.read_bytes()
    at = data.rfind(b"short.txt")  # renamed in the index (the last copy of the name)
    (tmp_path / "bad.tar.zst").write_bytes(data[:at] + b"short.txx" + data[at + 9 :])
    with open_archive(str(tmp_path / "bad.tar.zst")) as arc:
        assert arc.verify() == ["short.txx"]


def test_an_index_size_other_than_the_headers_is_refused(tmp_path: Path) -> None:
    """The index says 500 of the 700 bytes (and their CRC-32): the header says 700."""
    import zlib
    from bisect import bisect_left, bisect_right

    from cdml_edge.archive.tar import seekable

    items = [("a.bin", bytes(range(256)) * 2 + b"x" * 188), ("b.bin", b"B" * 70)]
    data = pack(items, format="tar.zst")
    with open_archive(data) as arc:
        x, f = arc.rows.index, arc.rows.frames  # type: ignore[attr-defined]
    doff = f.doff
    records = []
    for k, (name, blob) in enumerate(items):
        size = 500 if name == "a.bin" else len(blob)
        d = x.data_offsets[k]
        first, last = bisect_right(doff, d) - 1, bisect_left(doff, d + size) - 1
        records.append(
            (name, x.header_offsets[k], d, size, x.mtimes[k], zlib.crc32(blob[:size]), first, last)
        )
    index = seekable.index_frame(records)
    sizes = [(f.coff[k + 1] - f.coff[k], doff[k + 1] - doff[k]) for k in range(f.count)]
    bad = data[: f.coff[f.count]] + index + seekable.seek_table_frame([*sizes, (len(index), 0)])
    for src in _sources(tmp_path, bad):
        with open_archive(src) as arc:
            assert arc.read("b.bin") == b"B" * 70
            with pytest.raises(CorruptArchiveError, match="gives 700 bytes, the member index 500"):
                arc.read("a.bin")
            assert arc.verify() == ["a.bin"]


def test_a_pickled_archive_checks_the_headers_too(tmp_path: Path) -> None:
    import pickle

    items = [("cat/0001.txt", b"meow"), ("dog/0001.txt", b"woof")]
    bad = _swapped(pack(items, format="tar.zst"), "cat/0001.txt", "dog/0001.txt")
    for src in _sources(tmp_path, bad):
        with open_archive(src) as arc:
            again = pickle.loads(pickle.dumps(arc))
            with pytest.raises(CorruptArchiveError, match="tar header"):
                again.read("cat/0001.txt")
            again.close()
