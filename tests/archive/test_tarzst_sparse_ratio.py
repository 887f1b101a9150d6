"""A sparse member of a tar.zst is held to ``max_ratio`` against its stored bytes, as in a tar.

``tar -S --zstd`` of a 9 MB file with 12 KB of (compressible) data: the plain tar reads
(9 MB over 12 KB stored, 750 times), but the same tar in zstd was refused ("expansion ratio
2974 over max_ratio=1100"): the expansion of the holes was measured against the member's
share of the zstd frames, where the stored bytes' own zstd expansion is already held to
zstd's bound. One tar, two answers. Built with GNU tar at test time; both engines.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from cdml_edge.archive import MemberTooLargeError, open_archive

pytestmark = pytest.mark.skipif(
    shutil.which("tar") is None or shutil.which("zstd") is None, reason="GNU tar / zstd missing"
)


def _sparse_file(path: Path, size: int, runs: list[tuple[int, bytes]]) -> None:
    with open(path, "wb") as f:
        for offset, data in runs:
            f.seek(offset)
            f.write(data)
        f.truncate(size)


def _tar(folder: Path, out: Path, *extra: str) -> None:
    subprocess.run(
        ["tar", "--format=pax", "-S", *extra, "-cf", str(out), "-C", str(folder), "."], check=True
    )


def _want(path: Path) -> dict[str, bytes]:
    raw = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True).stdout
    tmp = path.with_suffix(".plain")
    tmp.write_bytes(raw)
    with tarfile.open(tmp) as tf:
        return {m.name.removeprefix("./"): tf.extractfile(m).read() for m in tf if m.isfile()}  # type: ignore[union-attr]


def test_a_sparse_member_reads_from_tar_zst_as_from_tar(engine: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _sparse_file(src / "sparse.bin", 9_000_000, [(0, b"A" * 5000), (3_000_000, b"B" * 7000)])
    (src / "after.txt").write_bytes(b"the member after it\n")
    _tar(src, tmp_path / "s.tar")
    _tar(src, tmp_path / "s.tar.zst", "--zstd")
    want = _want(tmp_path / "s.tar.zst")
    assert len(want["sparse.bin"]) == 9_000_000
    for name in ("s.tar", "s.tar.zst"):
        with open_archive(tmp_path / name) as arc:
            assert {n: arc.read(n) for n in arc.names()} == want, name
            assert arc.read_many(sorted(want)) == [want[n] for n in sorted(want)], name


def test_holes_past_max_ratio_of_the_stored_bytes_stay_refused(engine: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _sparse_file(src / "holes.bin", 64 << 20, [(0, b"C" * 4096)])  # 16,384 times 4 KiB
    _tar(src, tmp_path / "h.tar.zst", "--zstd")
    with open_archive(tmp_path / "h.tar.zst") as arc:
        with pytest.raises(MemberTooLargeError, match="over max_ratio=1100") as exc:
            arc.read("holes.bin")
        assert exc.value.member == "holes.bin" and exc.value.archive


def test_holes_over_compressible_runs_stay_held_to_zstds_bound(engine: str, tmp_path: Path) -> None:
    """Holes over runs zstd shrinks to nothing are held to zstd's bound: refused.

    1,000 times 1 MiB stored (within ``max_ratio``), in a few hundred bytes of zstd.
    """
    src = tmp_path / "src"
    src.mkdir()
    _sparse_file(src / "bomb.bin", 1000 << 20, [(0, b"\x01" * (1 << 20))])
    _tar(src, tmp_path / "b.tar.zst", "--zstd", "--hole-detection=seek")
    assert (tmp_path / "b.tar.zst").stat().st_size < 4096
    with open_archive(tmp_path / "b.tar.zst") as arc:
        assert arc.info("bomb.bin").size == 1000 << 20
        with pytest.raises(
            MemberTooLargeError, match=r"over 35200 for zstd \(max_ratio=1100 x 32\)"
        ) as exc:
            arc.read("bomb.bin")
        assert exc.value.member == "bomb.bin"


def test_a_member_share_of_a_one_frame_tar_zst_is_within_the_file(
    engine: str, tmp_path: Path
) -> None:
    """A member's compressed size in a stock tar.zst is within the file.

    One frame: it is estimated as the member's share of the stream, which was taken against
    where the last member's data starts, not where it ends: one 1 MiB member of a 300-byte
    file claimed 100 KB compressed, so its ratio looked 300 times smaller than it is.
    """
    src = tmp_path / "src"
    src.mkdir()
    (src / "ones.bin").write_bytes(b"\x01" * (1 << 20))
    _tar(src, tmp_path / "o.tar.zst", "--zstd")
    size = (tmp_path / "o.tar.zst").stat().st_size
    with open_archive(tmp_path / "o.tar.zst") as arc:
        info = arc.info("ones.bin")
        assert 0 < info.compressed_size <= size
        assert arc.read("ones.bin") == b"\x01" * (1 << 20)
