"""Archives written by other tools: what the reader says about each (bytes built here)."""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from helpers.archives import raw_zip

from cdml_edge.archive import open_archive
from cdml_edge.archive.base import Archive
from cdml_edge.archive.errors import CorruptArchiveError, UnsupportedArchiveError
from cdml_edge.archive.tar import seekable
from cdml_edge.archive.tar.frames import PythonFrames


def _zip_with_method(method: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", b"hello")
    return _with_method(buf.getvalue(), method)


def _with_method(built: bytes, method: int) -> bytes:
    """A one-member ZIP with its method fields set to ``method``."""
    data = bytearray(built)
    data[8:10] = struct.pack("<H", method)  # the local header
    cd = data.find(b"PK\x01\x02")
    data[cd + 10 : cd + 12] = struct.pack("<H", method)  # the central directory
    return bytes(data)


@pytest.mark.parametrize(
    ("method", "said"),
    [
        (9, "compression method 9 (Deflate64) is not supported"),
        (98, "compression method 98 (PPMd) is not supported"),
        (95, "compression method 95 (xz) is not supported"),
        (99, "compression method 99 (AES) is not supported"),
        (77, "compression method 77 is not supported"),
    ],
)
def test_an_unsupported_zip_method_is_named(method: int, said: str) -> None:
    arc = open_archive(_zip_with_method(method))
    with pytest.raises(UnsupportedArchiveError) as got:
        arc.read("a.txt")
    assert said in str(got.value)
    assert got.value.member == "a.txt" and "method-" not in str(got.value)


@pytest.mark.parametrize("size", [1024, 10240, 20480])
def test_a_file_of_zero_blocks_is_an_empty_tar(size: int) -> None:
    """``tar -cf e.tar -T /dev/null`` writes 10240 zero bytes: 0 members, as its tar.zst."""
    arc = open_archive(b"\x00" * size)
    assert arc.names() == [] and len(arc) == 0
    zst = open_archive(zstandard.ZstdCompressor().compress(b"\x00" * size))
    assert zst.names() == []


@pytest.mark.parametrize("data", [b"\x00" * 512, b"\x00" * 1000, b"\x00" * 10239, b""])
def test_other_zero_files_are_not_archives(data: bytes) -> None:
    with pytest.raises(UnsupportedArchiveError):
        open_archive(data)


def test_zero_blocks_then_other_bytes_are_not_an_empty_tar() -> None:
    with pytest.raises((UnsupportedArchiveError, CorruptArchiveError)):
        open_archive(b"\x00" * 10240 + b"x" * 512)


def _tar(payload: bytes = b"x" * 1000) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("cat/a.bin")
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _long_window_frame(raw: bytes) -> bytes:
    """A frame as ``zstd --long=30`` writes it: a 1 GiB window declared (no content size)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=30, enable_ldm=True, write_content_size=False
    )
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as w:
        w.write(raw)
    frame = out.getvalue()
    assert zstandard.get_frame_parameters(frame).window_size == 1 << 30
    return frame


def _dictionary_frame(raw: bytes) -> bytes:
    samples = [bytes([i]) * 50 + b"abc%d" % i * 20 for i in range(200)]
    d = zstandard.train_dictionary(1024, samples)
    frame = zstandard.ZstdCompressor(dict_data=d).compress(raw)
    assert zstandard.get_frame_parameters(frame).dict_id != 0
    return frame


def _opened_and_read(data: bytes | Path) -> None:
    arc = open_archive(data)
    arc.read("cat/a.bin")


@pytest.mark.parametrize("on_disk", [False, True])
@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_long_window_frame, r"window of 1 GiB; the reader allows at most 128 MiB"),
        (_dictionary_frame, r"made with a dictionary \(id \d+\)"),
    ],
)
def test_stock_tar_zst_frames_the_reader_cannot_decode_are_unsupported(
    make: Callable[[bytes], bytes], said: str, on_disk: bool, tmp_path: Path
) -> None:
    """``zstd --long=30`` and ``zstd -D dict`` write valid frames: unsupported, not corrupt."""
    data = make(_tar())
    source: bytes | Path = data
    if on_disk:
        source = tmp_path / "a.tar.zst"
        source.write_bytes(data)
    with pytest.raises(UnsupportedArchiveError, match=said) as e:
        _opened_and_read(source)
    assert e.value.archive == ("<memory>" if not on_disk else str(source))


def test_a_zip_zstd_member_made_with_a_dictionary_is_unsupported() -> None:
    plain = b"x" * 1000
    built = raw_zip(
        [(b"a.bin", _dictionary_frame(plain), 0)],
        crc_override=zlib.crc32(plain),
        usize_override=len(plain),
    )
    arc = open_archive(_with_method(built, 93))
    with pytest.raises(UnsupportedArchiveError, match="dictionary") as e:
        arc.read("a.bin")
    assert e.value.member == "a.bin"


def _seekable(make: Callable[[bytes], bytes]) -> bytes:
    """A seekable tar.zst with our member index whose one frame ``make`` writes."""
    raw = _tar()
    frame = make(raw)
    record = ("cat/a.bin", 0, 512, 1000, 0.0, zlib.crc32(b"x" * 1000), 0, 0)
    index = seekable.index_frame([record])
    table = seekable.seek_table_frame([(len(frame), len(raw)), (len(index), 0)])
    return frame + index + table


@pytest.mark.parametrize(
    ("make", "said"),
    [(_long_window_frame, r"window of 1 GiB.*at most 128 MiB"), (_dictionary_frame, "dictionary")],
)
@pytest.mark.parametrize("engine", ["native", "python"])
def test_frame_decoders_agree_on_unsupported_frames(
    make: Callable[[bytes], bytes], said: str, engine: str, tmp_path: Path
) -> None:
    """The C core's frame decoder (its codes mapped in Python) and the Python one agree."""
    path = tmp_path / "a.tar.zst"
    path.write_bytes(_seekable(make))
    for source in (path, path.read_bytes()):
        arc = open_archive(source)
        assert arc.names() == ["cat/a.bin"]
        if engine == "python":
            arc._decoder = PythonFrames()  # type: ignore[attr-defined]
        elif arc.engine != "native":  # type: ignore[attr-defined]
            pytest.skip("the C core has no zstd frame decoder here")
        for many in (False, True):
            if engine == "native" and make is _long_window_frame:
                # libzstd decodes a whole frame into its known size with no window limit
                assert _read(arc, many) == b"x" * 1000
                continue
            with pytest.raises(UnsupportedArchiveError, match=said) as e:
                _read(arc, many)
            assert e.value.archive == arc.name and e.value.member == "cat/a.bin"


def _read(arc: Archive, many: bool) -> bytes:
    return [*arc.read_many(["cat/a.bin"])][0] if many else arc.read("cat/a.bin")
