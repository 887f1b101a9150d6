"""A tar.zst of one zstd frame read member after member, without a seekable copy.

Each read used to decompress from the start of the frame, so reading every member in
archive order cost the square of the archive (a source larger than the copy's bound, or
``seekable_cache`` off). A read at or after where the last one stopped now continues there.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading

import pytest
import zstandard
from helpers.archives import CountingSource

from cdml_edge.archive import TruncatedArchiveError, open_archive
from cdml_edge.archive.source import FileSource, MemorySource

MEMBER = 20_000
COUNT = 60


def _stock_tar_zst(count: int = COUNT, *, level: int = 3, long: bool = False) -> bytes:
    """One zstd frame over a tar, as ``tar --zstd`` writes it; members of random bytes."""
    buf = io.BytesIO()
    rng = __import__("random").Random(7)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(count):
            data = rng.randbytes(MEMBER)
            info = tarfile.TarInfo(f"d/{i:03d}.bin")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    # through a pipe, as tar writes it: no content size, so the window is the level's
    params = zstandard.ZstdCompressionParameters.from_level(level, window_log=27 if long else 0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return cobj.compress(buf.getvalue()) + cobj.flush()


def _members(data: bytes) -> dict[str, bytes]:
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}  # type: ignore[union-attr]


def test_members_read_in_archive_order_decompress_the_frame_once() -> None:
    data = _stock_tar_zst()
    want = _members(data)
    src = CountingSource(MemorySource(data))
    arc = open_archive(src)
    assert not arc.seekable  # type: ignore[attr-defined]
    src.calls.clear()
    names = arc.names()
    assert [arc.read(n) for n in names] == [want[n] for n in names]
    # each read from the frame's start would take COUNT / 2 archives' worth
    assert src.bytes_read() < 2 * len(data)


def test_a_read_before_the_last_one_starts_again_and_still_gets_its_bytes() -> None:
    data = _stock_tar_zst()
    want = _members(data)
    arc = open_archive(MemorySource(data))
    names = arc.names()
    order = names[30:40] + names[5:8] + names[40:] + names[:3] + [names[39], names[39]]
    assert [arc.read(n) for n in order] == [want[n] for n in order]
    assert arc.read_many(names[::-1]) == [want[n] for n in names[::-1]]


def test_threads_reading_one_archive_each_get_their_own_members() -> None:
    data = _stock_tar_zst()
    want = _members(data)
    arc = open_archive(MemorySource(data))
    names = arc.names()
    bad: list[str] = []

    def read_all(ordered: list[str]) -> None:
        for n in ordered:
            if arc.read(n) != want[n]:
                bad.append(n)

    threads = [threading.Thread(target=read_all, args=(names[k::3],)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not bad and not any(t.is_alive() for t in threads)


def test_a_cut_stream_fails_each_read_past_the_cut_and_the_ones_before_still_read(
    tmp_path: os.PathLike[str],
) -> None:
    data = _stock_tar_zst()
    want = _members(data)
    whole = open_archive(MemorySource(data))
    names = whole.names()
    path = os.path.join(tmp_path, "cut.tar.zst")
    with open(path, "wb") as f:
        f.write(data)
    arc = open_archive(FileSource(path))
    assert arc.read(names[1]) == want[names[1]]
    os.truncate(path, len(data) // 2)
    # the file changed under the archive: refused as changed or as cut, never wrong bytes
    with pytest.raises(Exception) as got:
        arc.read(names[-1])
    assert isinstance(got.value, (TruncatedArchiveError, OSError)) or "changed" in str(got.value)


def test_a_frame_with_a_long_window_is_not_held_between_reads() -> None:
    data = _stock_tar_zst(level=3, long=True)
    want = _members(data)
    arc = open_archive(MemorySource(data))
    names = arc.names()
    assert [arc.read(n) for n in names[:5]] == [want[n] for n in names[:5]]
    assert zstandard.get_frame_parameters(data).window_size == 128 << 20
    assert not arc._cursors.held  # type: ignore[attr-defined]


def test_a_frame_with_a_small_window_is_held_until_the_archive_is_closed() -> None:
    data = _stock_tar_zst()
    assert zstandard.get_frame_parameters(data).window_size <= 8 << 20
    arc = open_archive(MemorySource(data))
    arc.read(arc.names()[3])
    assert arc._cursors.held  # type: ignore[attr-defined]
    arc.close()
    assert not arc._cursors.held  # type: ignore[attr-defined]


def test_a_close_during_a_read_keeps_no_stream() -> None:
    """``close()`` while another thread reads: the read must not keep its stream after it."""
    arc = open_archive(MemorySource(_stock_tar_zst()))
    slot = arc._cursors  # type: ignore[attr-defined]
    with slot.at(0) as cur:
        cur.read(10)
        arc.close()  # the other thread's close, while this read is under way
    assert not slot.held
