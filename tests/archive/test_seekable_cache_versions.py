"""A seekable copy is the copy of the source as it is now, and its errors name the source.

A new version put in place with the old size and ``mtime`` (``cp -p``, ``rsync -t``,
``os.utime``) must not be served from the old version's copy; the stock archives here are
built in the test (one zstd frame, no seek table: what ``tar --zstd`` writes).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zstandard

from cdml_edge.archive import MemberTooLargeError, open_archive
from cdml_edge.archive.seekable_cache import SeekableCache


def _stock(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_577_836_800
            t.addfile(info, io.BytesIO(data))
    return zstandard.ZstdCompressor(level=3).compress(buf.getvalue())


def _versions() -> tuple[bytes, bytes]:
    a, b = _stock({"label.txt": b"A" * 1000}), _stock({"label.txt": b"B" * 1000})
    assert len(a) == len(b)
    return a, b


def _read(path: Path, cache: SeekableCache) -> bytes:
    """The first bytes of ``label.txt``, the archive closed (a copy held open is kept)."""
    with open_archive(path, seekable_cache=cache) as arc:
        assert arc.seekable_copy is not None  # type: ignore[attr-defined]
        return arc.read("label.txt")[:3]


def test_rewritten_in_place_with_the_old_mtime(tmp_path: Path) -> None:
    old, new = _versions()
    path, cache = tmp_path / "data.tar.zst", SeekableCache(tmp_path / "cache")
    path.write_bytes(old)
    assert _read(path, cache) == b"AAA"
    st = path.stat()
    path.write_bytes(new)  # same inode, same size; the mtime put back (cp -p onto it)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _read(path, cache) == b"BBB"
    assert len([p for p in cache.root.iterdir() if not p.name.endswith(".idx")]) == 1


def test_replaced_with_the_old_size_and_mtime(tmp_path: Path) -> None:
    old, new = _versions()
    path, cache = tmp_path / "data.tar.zst", SeekableCache(tmp_path / "cache")
    path.write_bytes(old)
    assert _read(path, cache) == b"AAA"
    st = path.stat()
    tmp = tmp_path / "incoming"
    tmp.write_bytes(new)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))  # rsync -t: then renamed over it
    os.replace(tmp, path)
    assert _read(path, cache) == b"BBB"


def test_copy_keyed_the_earlier_way_is_dropped(tmp_path: Path) -> None:
    """A copy keyed on size and mtime alone is never read, and goes when the new one is made."""
    old, new = _versions()
    path, cache = tmp_path / "data.tar.zst", SeekableCache(tmp_path / "cache")
    path.write_bytes(new)
    st = path.stat()
    ident = hashlib.sha256(f"file|{os.path.realpath(path)}".encode()).hexdigest()[:24]
    version = hashlib.sha256(f"{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cache.root.mkdir()
    earlier = cache.root / f"{ident}-{version}.tar.zst"
    earlier.write_bytes(old)  # the old version's seekable copy, as an earlier release keyed it
    assert _read(path, cache) == b"BBB"
    assert not earlier.exists()


def test_errors_name_the_source_not_the_copy(tmp_path: Path) -> None:
    path, cache = tmp_path / "data.tar.zst", SeekableCache(tmp_path / "cache")
    path.write_bytes(_stock({"big.bin": os.urandom(3 << 20), "small.txt": b"x"}))
    arc = open_archive(path, seekable_cache=cache, max_member_bytes=2 << 20)
    copy = arc.seekable_copy.path  # type: ignore[attr-defined]
    with pytest.raises(MemberTooLargeError) as err:
        arc.read("big.bin")
    assert err.value.archive is not None and err.value.archive.startswith(str(path))
    assert str(err.value).startswith(f"{path} (seekable copy {copy}): big.bin: ")


def test_copy_reused_elsewhere_stays_readable_after_pickling(tmp_path: Path) -> None:
    """Reuse refreshes a copy's mtime (the eviction order): not a change of the copy."""
    path, cache = tmp_path / "data.tar.zst", SeekableCache(tmp_path / "cache")
    path.write_bytes(_stock({"label.txt": b"A" * 1000}))
    arc = open_archive(path, seekable_cache=cache)
    blob = pickle.dumps(arc)  # as a spawned worker gets it
    copy = Path(arc.seekable_copy.path)  # type: ignore[attr-defined]
    os.utime(copy, ns=(1, 1))
    assert _read(path, cache) == b"AAA"  # another open reuses the copy: mtime refreshed
    assert pickle.loads(blob).read("label.txt") == b"A" * 1000


def test_a_fifo_under_a_copys_name_does_not_block_the_clean_up(tmp_path: Path) -> None:
    """A named pipe where an older copy would be: skipped, not opened and waited on for ever."""
    path = tmp_path / "data.tar.zst"
    path.write_bytes(_versions()[1])
    st = path.stat()
    ident = hashlib.sha256(f"file|{os.path.realpath(path)}".encode()).hexdigest()[:24]
    version = hashlib.sha256(f"{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    (tmp_path / "cache").mkdir()
    os.mkfifo(tmp_path / "cache" / f"{ident}-{version}.tar.zst")
    code = (
        "import sys; from pathlib import Path\n"
        "from cdml_edge.archive import open_archive\n"
        "from cdml_edge.archive.seekable_cache import SeekableCache\n"
        "cache = SeekableCache(Path(sys.argv[2]))\n"
        "with open_archive(Path(sys.argv[1]), seekable_cache=cache) as a:\n"
        "    print(a.read('label.txt')[:3].decode())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "BBB"
