"""A pickled (or cloned) archive carries its parsed index: the receiver reads no index bytes."""

from __future__ import annotations

import pickle
import zlib
from pathlib import Path

import pytest
from helpers.archives import CountingSource

from cdml_edge.archive import open_archive, pack
from cdml_edge.archive.base import Archive
from cdml_edge.archive.source import FileSource
from cdml_edge.archive.tar.read import TarArchive

N = 3000


def _items() -> list[tuple[str, bytes]]:
    return [(f"cls{i % 3}/{i:05d}.bin", zlib.compress(i.to_bytes(4, "little"))) for i in range(N)]


def _same(a: Archive, b: Archive) -> None:
    assert b.names() == a.names() and b.infos() == a.infos() and b.duplicates() == a.duplicates()
    picked = a.names()[::97]
    assert b.read_many(picked) == a.read_many(picked)
    assert b.read(picked[-1]) == a.read(picked[-1])


def _counted(path: Path) -> tuple[Archive, CountingSource]:
    src = CountingSource(FileSource(path))
    return open_archive(src), src


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("fmt", ["zip", "tar.zst"])
def test_unpickled_archive_reads_no_index(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"a.{fmt}"
    path.write_bytes(pack(_items(), fmt, frame_bytes=4096) if fmt != "zip" else pack(_items(), fmt))
    arc, src = _counted(path)
    assert src.calls  # opening read the tail and the index
    state = pickle.dumps(arc)
    clone = pickle.loads(state)
    assert clone.source.calls == src.calls  # type: ignore[attr-defined]  # nothing more
    assert clone.engine == arc.engine and clone.format == arc.format
    before = len(src.calls)
    copy = arc.clone()
    assert len(src.calls) == before and copy is not arc
    _same(arc, clone)
    _same(arc, copy)


@pytest.mark.usefixtures("engine")
def test_pickled_zip_index_is_compact(tmp_path: Path) -> None:
    """The index travels as arrays and one names string, not as a list of tuples."""
    path = tmp_path / "a.zip"
    path.write_bytes(pack(_items(), "zip"))
    arc = open_archive(path)
    size = len(pickle.dumps(arc))
    names = sum(len(n) + 1 for n in arc.names())
    per_member = (size - names) / len(arc)
    assert per_member <= 72  # C entry (64 bytes) or 8 columns (44 bytes), plus framing
    assert len(pickle.dumps(arc._rows.row_names)) > names  # type: ignore[attr-defined]


def test_pickled_plain_tar_carries_its_members(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in _items()[:200]:
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "a.tar"
    path.write_bytes(buf.getvalue())
    arc, src = _counted(path)
    assert isinstance(arc, TarArchive) and arc.names()[0] == "cls0/00000.bin"
    clone = pickle.loads(pickle.dumps(arc))
    assert clone.source.calls == src.calls  # type: ignore[attr-defined]
    _same(arc, clone)


def test_receiver_without_the_c_core_reads_the_index_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.zip"
    path.write_bytes(pack(_items(), "zip"))
    arc = open_archive(path)
    assert arc.engine == "native"
    state = pickle.dumps(arc)
    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
    clone = pickle.loads(state)
    assert clone.engine == "python"
    _same(arc, clone)


def _reordered_zip(overlap: bool) -> bytes:
    """A ZIP whose central directory lists members in reverse order (offsets unsorted).

    With ``overlap``, the last record points 10 bytes into the first member.
    """
    import io
    import struct
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(5):
            zf.writestr(f"m{i}.bin", bytes([i]) * 100)
    blob = buf.getvalue()
    eocd = blob.rindex(b"PK\x05\x06")
    cd_size, cd_off = struct.unpack_from("<LL", blob, eocd + 12)
    records, pos = [], cd_off
    while pos < cd_off + cd_size:
        n, e, c = struct.unpack_from("<HHH", blob, pos + 28)
        records.append(bytearray(blob[pos : pos + 46 + n + e + c]))
        pos += 46 + n + e + c
    if overlap:
        struct.pack_into("<L", records[-1], 42, 10)
    return blob[:cd_off] + b"".join(reversed(records)) + blob[cd_off + cd_size :]


@pytest.mark.usefixtures("engine")
def test_overlap_check_on_an_unsorted_central_directory(tmp_path: Path) -> None:
    from cdml_edge.archive import UnsafeMemberError

    ok = open_archive(_reordered_zip(False))
    assert ok.names() == [f"m{i}.bin" for i in reversed(range(5))]
    assert ok.read("m2.bin") == bytes([2]) * 100
    with pytest.raises(UnsafeMemberError, match=r"overlaps member 'm0.bin' \(offset 10\)") as exc:
        open_archive(_reordered_zip(True))
    assert exc.value.member == "m4.bin"
