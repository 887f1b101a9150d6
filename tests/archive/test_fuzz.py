"""Mutated archives (truncation, bit flips, header field edits) never crash or hang.

Every mutation either opens and reads or raises ArchiveError; it must never segfault,
loop forever, or raise anything untyped. Each is opened from bytes, from a real file and
from a source with neither (the C core's memory, file-descriptor and caller-read paths;
for tar.zst: frames decoded in C, one member or a batch). The seeds include tar.zst from
another writer (frames cut inside members, a skippable frame between them), of the
earlier layout and a stock one (one frame); every input is also written as the plain copy
a stock tar.zst gets (the C core's decompression and header walk). The fuzz bodies run in
a child process with a time limit, so a hang or a crash fails the test instead of stalling
or killing the run. Runs on the C core and the Python path.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import tar_cases
from helpers.archives import raw_zip
from helpers.paths import TESTS

from cdml_edge.archive import ArchiveError, open_archive, pack
from cdml_edge.archive.source import MemorySource
from cdml_edge.archive.tar import seekable

_RNG = random.Random(11)
_ITEMS = [
    ("a.txt", b"alpha " * 40),
    ("dir/b.bin", _RNG.randbytes(300)),
    ("c.json", b'{"k": [1, 2, 3]}' * 8),
    ("d.jpg", _RNG.randbytes(200)),
    ("e", b""),
]
SEEDS = {
    "zip": pack(_ITEMS, format="zip", mtime=1e9),
    "tar.zst": pack(_ITEMS, format="tar.zst", mtime=1e9, frame_bytes=256),
}


pytestmark = pytest.mark.usefixtures("engine")


def _tar() -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in _ITEMS[:3]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


SEEDS["tar"] = _tar()


def _foreign_tar_zst() -> bytes:
    """A seekable tar.zst as another writer makes it, with no member index.

    Frames cut inside members, a skippable frame between two of them.
    """
    import zstandard

    plain = _tar()
    cuts = [0, 700, 1300, len(plain)]
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    frames = [cctx.compress(plain[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    skip = b"\x50\x2a\x4d\x18" + struct.pack("<L", 3) + b"abc"
    sizes = [(len(frames[0]), 700), (len(skip), 0), (len(frames[1]), 600)]
    sizes.append((len(frames[2]), len(plain) - 1300))
    return frames[0] + skip + frames[1] + frames[2] + seekable.seek_table_frame(sizes)


def _layout_v1(data: bytes) -> bytes:
    """Our tar.zst as the earlier writer laid it out: no seek-table entry for the index."""
    count = struct.unpack_from("<L", data, len(data) - 9)[0]
    table = len(data) - (8 + count * 8 + 9)
    entries = [struct.unpack_from("<LL", data, table + 8 + 8 * k) for k in range(count - 1)]
    return data[:table] + seekable.seek_table_frame(entries)


SEEDS["tar.zst-foreign"] = _foreign_tar_zst()
SEEDS["tar.zst-v1"] = _layout_v1(SEEDS["tar.zst"])
SEEDS["zip-zstd"] = raw_zip([(b"z.txt", b"zstd member " * 30, 93), (b"d.txt", b"deflate" * 20, 8)])
SEEDS["tar-sparse-gnu"] = tar_cases.old_gnu_sparse(True)
SEEDS["tar-sparse-pax"] = tar_cases.pax_sparse("1.0")
SEEDS["tar.zst-stock"] = (
    __import__("zstandard")
    .ZstdCompressor()
    .compress(  # one frame
        SEEDS["tar"] + tar_cases.links_and_devices() + _RNG.randbytes(600)
    )
)

# Where structure lives: the fields a mutation aims at (besides random positions).
_SIGS = (
    b"PK\x01\x02",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x28\xb5\x2f\xfd",
    b"\x5e\x2a\x4d\x18",
    b"\x5d\x2a\x4d\x18",
)


# a hang is a run far past the normal few seconds (generous: the machine may be busy)
CHILD_TIMEOUT_S = 150
_FILE = Path(tempfile.gettempdir()) / f"fuzz-archive-{os.getpid()}.bin"


class _Fetched:
    """Bytes the C core cannot reach itself (no descriptor, not memory it knows).

    The reader fetches them first, as for S3.
    """

    def __init__(self, data: bytes) -> None:
        self._mem = MemorySource(data)
        self.name = "<fetched>"
        self.size, self.pread, self.pread_many = (
            self._mem.size,
            self._mem.pread,
            self._mem.pread_many,
        )

    def fileno(self) -> None:
        return None

    def close(self) -> None:
        pass


def exercise(data: bytes) -> None:
    """Open from bytes, a file and a fetched source and read everything.

    Read one by one, as a batch, with a repeat; only ArchiveError may come out.
    """
    _exercise(data)
    _exercise(_Fetched(data))
    _FILE.write_bytes(data)
    try:
        _exercise(_FILE)
        plain_copy(_FILE)
    finally:
        _FILE.unlink()


def plain_copy(path: Path) -> None:
    """Write the plain copy a stock tar.zst gets (the C core's copy and header walk)."""
    import zstandard

    from cdml_edge.archive.source import FileSource
    from cdml_edge.archive.tar.reframe import write_plain_copy

    src = FileSource(path)
    try:
        with (
            tempfile.TemporaryFile() as out,
            contextlib.suppress(ArchiveError, EOFError, zstandard.ZstdError),
        ):  # what the seekable cache turns into "read as it is"
            write_plain_copy(src, src.size(), out)
    finally:
        src.close()


def _exercise(src: bytes | Path | _Fetched) -> None:
    try:
        arc = open_archive(src, max_member_bytes=1 << 22)
    except ArchiveError:
        return
    names = arc.names()
    for n in names:
        try:
            arc.info(n)
            arc.read(n)
        except ArchiveError:
            pass
    with contextlib.suppress(ArchiveError):
        arc.read_many(names)
    with contextlib.suppress(ArchiveError):
        arc.read_many(names[::-1] + names[:2])
    arc.verify()
    arc.close()


def mutated() -> Any:
    """The hypothesis strategy of a seed archive with 1 to 4 mutations.

    hypothesis is imported here, in the child that runs the fuzzing, not when the tests are
    collected.
    """
    from hypothesis import strategies as st

    @st.composite
    def mutation(draw: st.DrawFn) -> bytes:
        kind = draw(st.sampled_from(sorted(SEEDS)))
        data = bytearray(SEEDS[kind])
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["flip", "truncate", "field", "splice", "zero"]))
            if not data:
                break
            if op == "flip":
                pos = draw(st.integers(0, len(data) - 1))
                data[pos] ^= 1 << draw(st.integers(0, 7))
            elif op == "truncate":
                del data[draw(st.integers(0, len(data) - 1)) :]
            elif op == "zero":
                a = draw(st.integers(0, len(data) - 1))
                data[a : a + draw(st.integers(1, 64))] = bytes(min(64, len(data) - a))[: len(data)]
            elif op == "splice":
                a = draw(st.integers(0, len(data)))
                data[a:a] = draw(st.binary(max_size=32))
            else:  # overwrite a header field near a structure signature with an extreme value
                hits = [i for s in _SIGS for i in range(len(data)) if data.startswith(s, i)]
                base = draw(st.sampled_from(hits)) if hits else 0
                pos = min(len(data) - 1, base + draw(st.integers(0, 60)))
                value = draw(st.sampled_from([0, 1, 0xFF, 0xFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 1 << 20]))
                width = draw(st.sampled_from([1, 2, 4, 8]))
                raw = struct.pack("<Q", value)[:width]
                data[pos : pos + width] = raw
        return bytes(data)

    return mutation()


def _fuzz_once() -> None:
    """250 mutated archives through :func:`exercise`."""
    from hypothesis import HealthCheck, given, settings

    @settings(
        max_examples=250,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=mutated())
    def fuzz_once(data: bytes) -> None:
        exercise(data)

    fuzz_once()


def truncations() -> None:
    """Every seed cut at about 300 points."""
    for kind in sorted(SEEDS):
        seed = SEEDS[kind]
        for cut in range(0, len(seed), max(1, len(seed) // 300)):
            exercise(seed[:cut])


def _in_child(func: str) -> None:
    """Run ``func`` of this module in a child process (same engine); fail on hang or crash."""
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(TESTS)!r}]\n"
        "import test_fuzz as t\n"
        f"t.{func}()\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{func} hung: no result in {CHILD_TIMEOUT_S} s")
    if out.returncode != 0:
        pytest.fail(f"{func} exited {out.returncode}:\n{out.stderr[-4000:]}")


def test_mutated_archives_raise_typed_errors() -> None:
    _in_child("_fuzz_once")


def test_every_truncation_point() -> None:
    _in_child("truncations")


def test_child_failures_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child harness itself: a hang and a crash both fail."""
    monkeypatch.setattr(sys.modules[__name__], "CHILD_TIMEOUT_S", 2)
    for func in ("_hang", "_crash"):
        with pytest.raises(pytest.fail.Exception, match="hung|exited"):
            _in_child(func)


def _hang() -> None:
    import time

    time.sleep(60)


def _crash() -> None:
    os.abort()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd to count")
def test_a_refused_archive_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """Opening a bad file many times (a long-running agent does) must not leak descriptors."""
    bad = {
        "zip": SEEDS["zip"][:-30] + b"\xff" * 30,  # a broken end record
        "tar.zst": SEEDS["tar.zst"][:-40] + bytes(40),  # a broken seek table and index
        "short": b"PK\x05\x06",
    }
    before = len(os.listdir("/proc/self/fd"))
    for name, data in bad.items():
        path = tmp_path / name
        path.write_bytes(data)
        for _ in range(30):
            with contextlib.suppress(ArchiveError):
                open_archive(path).close()
    assert len(os.listdir("/proc/self/fd")) == before
