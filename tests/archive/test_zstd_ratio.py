"""zstd data is held to a ratio bound zstd can meet; bombs stay refused.

``max_ratio`` (1100) is just over deflate's maximum (1,032). zstd shrinks a run of zeros
up to 32,768 times, so zstd members and frames are held to ``max_ratio`` x 32 (35,200):
legitimate data reads, declared sizes zstd cannot produce and members over
``max_member_bytes`` are refused before memory is taken. (A seek table that claims
more than its frames hold is not trusted at all: ``test_frames``, ``test_fuzz``.)
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import zstandard

from cdml_edge import CDMLStreamDataset
from cdml_edge.archive import MemberTooLargeError, open_archive, write_archive
from cdml_edge.archive.seekable_cache import SeekableCache

CSV = b"0,0,0,0,0,0\n" * 200_000  # 2.4 MB of a sensor idling at zero


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _tar(items: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["tar.zst", "zip"])
def test_written_zeros_read_back(tmp_path: Path, fmt: str) -> None:
    zeros = _npy(np.zeros((1000, 1000), dtype=np.float32))
    items = [("idle.csv", CSV), ("zeros.npy", zeros), ("busy.csv", b"1,2,3,4,5,6\n" * 10)]
    path = tmp_path / f"w.{fmt}"
    write_archive(path, items)
    arc = open_archive(path)
    assert arc.read("idle.csv") == CSV and arc.read("zeros.npy") == zeros
    ds = CDMLStreamDataset(str(path), modality="csv", seekable_cache=False)
    assert sorted(tuple(ds[i].shape) for i in range(len(ds))) == [(10, 6), (200000, 6)]


def test_stock_zeros_read_through_the_seekable_copy(tmp_path: Path) -> None:
    path = tmp_path / "stock.tar.zst"
    files = [(f"{i}.csv", b"%d,%d\n" % (i, i) * 500) for i in range(20)]
    files.append(("zeros.bin", bytes(5_000_000)))  # a blank raw frame
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(_tar(files)))
    cache = SeekableCache(tmp_path / "cache")
    arc = open_archive(path, seekable_cache=cache)
    assert arc.seekable_copy is not None  # type: ignore[attr-defined]
    assert arc.read("zeros.bin") == bytes(5_000_000)
    ds = CDMLStreamDataset(str(path), seekable_cache=cache)
    i = [n for n, _ in ds.samples].index("zeros.bin")
    assert len(ds[i]) == 5_000_000


def test_zstd_bombs_are_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar.zst"
    write_archive(path, [("zeros.bin", bytes(64 << 20))])
    with pytest.raises(MemberTooLargeError, match="max_member_bytes"):
        open_archive(path, max_member_bytes=32 << 20).read("zeros.bin")
    with pytest.raises(MemberTooLargeError, match=r"3200 for zstd \(max_ratio=100 x 32\)"):
        open_archive(path, max_ratio=100).read("zeros.bin")
    assert len(open_archive(path).read("zeros.bin")) == 64 << 20
