"""JPEGs with extraneous bytes between their segments, as Photoshop and some cameras write them.

libjpeg skips bytes that are not a marker where one is due (warning "Corrupt JPEG data: N
extraneous bytes before marker"), so OpenCV, Pillow and viewers show such files. The header
walk and the EXIF walk skip them the same way, so the image is decoded, its decode limits
checked and its orientation applied, instead of being refused as unreadable.
"""

from __future__ import annotations

import cv2
import pytest
from helpers.exif_jpegs import jpeg, mean_diff, opencv_shows, pattern, with_orientation

from cdml_edge.decode import DecodeError, decode_image
from cdml_edge.decode.image_header import MAX_MARKERS, jpeg_header
from cdml_edge.decode.orientation import exif_orientation

JUNK = (b"hello", b"\x00" * 16, b"ab\xff\x00cd", b"\xff\xff\xff", b"x")


def _junk_before(data: bytes, marker: bytes, junk: bytes) -> bytes:
    """``data`` with ``junk`` inserted right before the first ``marker`` segment."""
    at = data.index(marker, 2)
    return data[:at] + junk + data[at:]


@pytest.mark.parametrize("junk", JUNK)
@pytest.mark.parametrize("backend", ["simplejpeg", "opencv"])
def test_extraneous_bytes_between_segments_are_skipped(
    junk: bytes, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    clean = jpeg()
    data = _junk_before(clean, b"\xff\xdb", junk)  # before the quantisation tables
    header = jpeg_header(data)
    assert header is not None and (header.width, header.height) == (96, 64)
    assert header == jpeg_header(clean)
    want = opencv_shows(data)  # OpenCV shows it
    assert mean_diff(want, pattern()) < 3.0
    assert mean_diff(decode_image(data, member="cam/1.jpg"), want) < 1.0
    small = cv2.resize(want, (32, 21), interpolation=cv2.INTER_AREA)
    assert mean_diff(decode_image(data, target_size=(32, 21)), small) < 3.0


def _exif_after_a_comment(code: int, junk: bytes) -> bytes:
    """A JPEG whose EXIF segment follows a comment segment and ``junk``.

    (Bytes right after the start-of-image marker are another matter: OpenCV and Pillow do
    not take such a file for a JPEG at all.)
    """
    data = with_orientation(jpeg(), code)
    return data[:2] + b"\xff\xfe\x00\x06note" + junk + data[2:]


@pytest.mark.parametrize("junk", JUNK)
def test_orientation_after_extraneous_bytes_is_applied(junk: bytes) -> None:
    data = _exif_after_a_comment(6, junk)
    assert exif_orientation(data) == 6
    want = opencv_shows(data)  # OpenCV turns it
    assert want.shape[:2] == (96, 64)
    assert mean_diff(decode_image(data), want) < 1.0


def test_fill_bytes_before_the_exif_segment_are_skipped() -> None:
    assert exif_orientation(_exif_after_a_comment(8, b"\xff\xff")) == 8


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xd8" + b"junk" * 100,  # no marker after the junk
        b"\xff\xd8" + b"\x00\xff\x00" * 50,  # stuffed zeros are no markers
        b"\xff\xd8hello\xff",  # a marker cut off
    ],
)
def test_junk_with_no_frame_after_it_is_refused(data: bytes) -> None:
    assert jpeg_header(data) is None
    assert exif_orientation(data) == 1
    with pytest.raises(DecodeError, match="cam/2.jpg"):
        decode_image(data, member="cam/2.jpg")


def test_junk_does_not_use_up_the_exif_walk() -> None:
    """32 comment segments, each followed by junk, before the EXIF segment (a hostile review)."""
    data = with_orientation(jpeg(), 6)
    data = data[:2] + b"\xff\xfe\x00\x03cj" * 32 + data[2:]
    assert exif_orientation(data) == 6
    assert decode_image(data).shape == opencv_shows(data).shape == (96, 64, 3)


@pytest.mark.parametrize("bare", [b"\xff\xd0", b"\xff\xd7", b"\xff\x01"])
def test_markers_without_a_length_before_the_exif_segment(bare: bytes) -> None:
    """RST0-7 and TEM carry no length, for the EXIF walk as for the header walk and libjpeg."""
    data = with_orientation(jpeg(), 6)
    data = data[:2] + b"\xff\xfe\x00\x06note" + bare + data[2:]
    assert exif_orientation(data) == 6
    assert decode_image(data).shape == opencv_shows(data).shape


@pytest.mark.parametrize("run", [b"\xff\xff", b"\xff\x00", b"\xff\xff\x00", b"a\xff\x00"])
def test_long_runs_that_are_no_marker_are_skipped(run: bytes) -> None:
    """A megabyte of fill bytes or stuffed zeros before the frame is skipped, to the same header."""
    clean = jpeg()
    data = _junk_before(clean, b"\xff\xdb", run * (1 << 20 // len(run)))
    assert jpeg_header(data) == jpeg_header(clean)


def test_a_header_of_thousands_of_segments_is_refused() -> None:
    """Past :data:`MAX_MARKERS` markers before the frame the walk gives up (real files: tens)."""
    clean = jpeg()
    many = clean[:2] + b"\xff\xfe\x00\x02" * (MAX_MARKERS + 1) + clean[2:]
    assert jpeg_header(many) is None
    with pytest.raises(DecodeError, match="cam/3.jpg"):
        decode_image(many, member="cam/3.jpg")
    some = clean[:2] + b"\xff\xfe\x00\x02" * 200 + clean[2:]
    assert jpeg_header(some) == jpeg_header(clean)
