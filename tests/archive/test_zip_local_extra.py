"""Local extra fields longer than the central directory's, before a data descriptor.

The C core reads the local header, the data and some slack in one go and reads on when the
local extra field is longer; the member's data descriptor must count in what it reads on.
Each ZIP is read from a file and from bytes, on both engines, and by zipfile.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from cdml_edge.archive import Arena, open_archive

pytestmark = pytest.mark.usefixtures("engine")

DATA = b"some data here\n" * 10


def _padded_zip(excess: int, descriptor: str, method: int = 8) -> bytes:
    """Members whose local extra field is ``excess`` bytes longer than the central one.

    ``descriptor``: ``""`` (none), ``"dd"`` (12 bytes after the signature), ``"dd-nosig"``
    or ``"dd64"`` (a ZIP64 descriptor, 8-byte sizes).
    """
    out = bytearray()
    central = bytearray()
    members = [(b"a.txt", DATA), (b"b.txt", DATA[::-1] * 3), (b"c.txt", b"")]
    for name, data in members:
        payload = zlib.compress(data)[2:-4] if method == 8 else data
        crc = zlib.crc32(data)
        flags = 8 if descriptor else 0
        extra = struct.pack("<HH", 0xD935, excess - 4) + b"\0" * (excess - 4) if excess else b""
        lcrc, lcs, lus = (0, 0, 0) if descriptor else (crc, len(payload), len(data))
        off = len(out)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 45, flags, method, 0, 0x21, lcrc, lcs, lus,
            len(name), len(extra),
        )  # fmt: skip
        out += name + extra + payload
        if descriptor == "dd":
            out += struct.pack("<IIII", 0x08074B50, crc, len(payload), len(data))
        elif descriptor == "dd-nosig":
            out += struct.pack("<III", crc, len(payload), len(data))
        elif descriptor == "dd64":
            out += struct.pack("<IIQQ", 0x08074B50, crc, len(payload), len(data))
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, flags, method, 0, 0x21, crc,
            len(payload), len(data), len(name), 0, 0, 0, 0, 0, off,
        )  # fmt: skip
        central += name
    cd_off = len(out)
    out += central
    n = len(members)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), cd_off, 0)
    return bytes(out)


def _zipfile(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


@pytest.mark.parametrize("descriptor", ["", "dd", "dd-nosig", "dd64"])
@pytest.mark.parametrize("excess", [0, 100, 124, 128, 129, 140, 200, 1000, 5000])
@pytest.mark.parametrize("method", [0, 8])
def test_long_local_extra_reads_as_zipfile_does(
    tmp_path: Path, excess: int, descriptor: str, method: int
) -> None:
    if excess and excess < 4:
        pytest.skip("an extra field holds at least its 4-byte header")
    data = _padded_zip(excess, descriptor, method)
    want = _zipfile(data)
    path = tmp_path / "pad.zip"
    path.write_bytes(data)
    for src in (str(path), data):
        with open_archive(src) as arc:
            names = arc.names()
            assert {n: arc.read(n) for n in names} == want
            assert arc.read_many(names) == [want[n] for n in names]
            arena = Arena()
            assert [bytes(v) for v in arc.read_many(names, arena=arena)] == [want[n] for n in names]
            assert arc.verify() == []
