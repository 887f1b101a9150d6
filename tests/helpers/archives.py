"""Helpers for the archive tests.

The ``engine`` fixture (both engines), hand-built ZIPs, counting sources.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from cdml_edge.archive.source import ByteSource


@pytest.fixture(params=["native", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on the C core and on the pure-Python path."""
    from cdml_edge.archive import native_available

    if request.param == "python":
        monkeypatch.setenv("CDML_EDGE_NATIVE", "0")
        assert not native_available()
    else:
        monkeypatch.delenv("CDML_EDGE_NATIVE", raising=False)
        assert native_available(), "the native archive core is not built"
    return str(request.param)


class CountingSource:
    """Wraps a ByteSource and counts requests (as an object store would bill them)."""

    def __init__(self, inner: ByteSource) -> None:
        self.inner = inner
        self.calls: list[tuple[str, object]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def size(self) -> int:
        return self.inner.size()

    def pread(self, offset: int, length: int) -> bytes:
        self.calls.append(("pread", (offset, length)))
        return self.inner.pread(offset, length)

    def pread_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self.calls.append(("pread_many", list(ranges)))
        return [self.inner.pread(o, n) for o, n in ranges]

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        pass

    def bytes_read(self) -> int:
        total = 0
        for kind, arg in self.calls:
            if kind == "pread":
                total += arg[1]  # type: ignore[index]
            else:
                total += sum(n for _, n in arg)  # type: ignore[union-attr]
        return total


def raw_zip(
    members: Sequence[tuple[bytes, bytes, int]],
    *,
    flags: int = 0,
    extra: bytes = b"",
    crc_override: int | None = None,
    usize_override: int | None = None,
) -> bytes:
    """A ZIP built by hand: ``(raw name, stored-or-compressed data, method)`` per member.

    Data for method 8 is deflated here, method 93 compressed with zstd, method 0 stored.
    """
    import zstandard

    out = bytearray()
    central = bytearray()
    for raw, data, method in members:
        if method == 8:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            body = c.compress(data) + c.flush()
        elif method == 93:
            body = zstandard.ZstdCompressor().compress(data)
        else:
            body = data
        crc = zlib.crc32(data) if crc_override is None else crc_override
        usize = len(data) if usize_override is None else usize_override
        off = len(out)
        out += struct.pack(
            "<4s2B4HL2L2H",
            b"PK\x03\x04",
            20,
            0,
            flags,
            method,
            0,
            0x5021,
            crc,
            len(body),
            usize,
            len(raw),
            0,
        )
        out += raw + body
        central += struct.pack(
            "<4s4B4HL2L5H2L",
            b"PK\x01\x02",
            20,
            0,
            20,
            0,
            flags,
            method,
            0,
            0x5021,
            crc,
            len(body),
            usize,
            len(raw),
            len(extra),
            0,
            0,
            0,
            0,
            off,
        )
        central += raw + extra
    cd_off = len(out)
    out += central
    out += struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), cd_off, 0
    )
    return bytes(out)


def write_tar(
    fileobj: Any, items: Sequence[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT
) -> None:
    """``items`` as a tar written by the stdlib into ``fileobj`` (any writable file)."""
    with tarfile.open(fileobj=fileobj, mode="w:", format=fmt) as tf:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def tar_bytes(items: Sequence[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    write_tar(buf, items, fmt)
    return buf.getvalue()
