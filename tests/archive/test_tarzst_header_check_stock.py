"""Stock tar.zst archives read through the seekable copy pass the tar header check.

GNU tar stores ``./`` + a 99-character name (101 bytes) as a long-name record and a ustar
header whose name field holds only its first 100 bytes; the copy's index points at that
lone header block. The check once judged by the *normal* name (at most 100 characters) that
the field held it whole, and refused the member. Names of ``a//b`` form likewise.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from cdml_edge.archive import CorruptArchiveError, open_archive, pack
from cdml_edge.archive.names import normalize_member_name
from cdml_edge.archive.seekable_cache import SeekableCache

pytestmark = pytest.mark.usefixtures("engine")

DATA = b"some text\n" * 2000
RAW = ["q" * 99, "r" * 100, "s" * 101, "a//" + "t" * 97, "b//" + "u" * 98]
RAW += ["c//d", "e/" * 49 + "f", "g" * 98, "h/" + "i" * 97]


def _folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for name in RAW:
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(DATA + name.encode())
    return src


def _tool(tmp_path: Path, args: list[str], targets: list[str]) -> Path:
    if shutil.which(args[0]) is None:
        pytest.skip(f"no {args[0]}")
    out = tmp_path / "x.tar.zst"
    subprocess.run([*args, str(out), "-C", str(tmp_path / "src"), *targets], check=True)
    return out


def _tarfile(tmp_path: Path, fmt: int) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for k, name in enumerate(RAW):
            info = tarfile.TarInfo("./" + name if k % 2 else name)  # 99-102 bytes raw
            info.size = len(DATA) + len(name)
            tf.addfile(info, io.BytesIO(DATA + name.encode()))
    out = tmp_path / "x.tar.zst"
    out.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return out


MAKERS = {
    "gnu-tar": lambda t: _tool(t, ["tar", "--zstd", "-cf"], ["."]),
    "gnu-tar-posix": lambda t: _tool(t, ["tar", "--format=posix", "--zstd", "-cf"], ["."]),
    "bsdtar": lambda t: _tool(t, ["bsdtar", "--zstd", "-cf"], ["."]),
    "bsdtar-gnutar": lambda t: _tool(t, ["bsdtar", "--format", "gnutar", "--zstd", "-cf"], ["."]),
    "tarfile-gnu": lambda t: _tarfile(t, tarfile.GNU_FORMAT),
    "tarfile-pax": lambda t: _tarfile(t, tarfile.PAX_FORMAT),
}


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_long_and_double_slash_names_read_through_the_copy(tmp_path: Path, maker: str) -> None:
    _folder(tmp_path)
    path = MAKERS[maker](tmp_path)
    want: dict[str, bytes] = {}
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())).read()
    with tarfile.open(fileobj=io.BytesIO(plain)) as tf:  # what tar reads (later entries win)
        for m in tf.getmembers():
            if m.isfile():
                want[normalize_member_name(m.name)] = tf.extractfile(m).read()  # type: ignore[union-attr]
    assert {normalize_member_name(n) for n in RAW} <= set(want)
    for _ in range(2):  # the copy made, then reused
        with open_archive(str(path), seekable_cache=SeekableCache(tmp_path / "cache")) as arc:
            assert arc.seekable_copy is not None  # type: ignore[attr-defined]
            assert {n: arc.read(n) for n in want} == want
            assert arc.verify() == []
            assert arc.read_many(sorted(want)) == [want[n] for n in sorted(want)]


def test_swapped_100_byte_names_of_our_own_tar_zst_are_still_refused() -> None:
    a, b = "a/" + "x" * 98, "a/" + "y" * 98  # 100 bytes: the ustar name field, full
    items = [(a, b"meow"), (b, b"woof")]
    good = pack(items, format="tar.zst")
    raw_a, raw_b = a.encode(), b.encode()
    i, j = good.rfind(raw_a), good.rfind(raw_b)
    bad = bytearray(good)
    bad[i : i + 100], bad[j : j + 100] = raw_b, raw_a
    with open_archive(bytes(bad)) as arc:
        with pytest.raises(CorruptArchiveError, match="tar header"):
            arc.read(a)
        assert sorted(arc.verify()) == [a, b]
