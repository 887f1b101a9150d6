"""EXIF orientation: one image for every backend (libjpeg-turbo, OpenCV, reduced scale).

Each of the eight orientations is written into a JPEG's APP1 segment; OpenCV's own
``imdecode`` (which applies the tag) is the independent reference.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from helpers.exif_jpegs import jpeg, mean_diff, opencv_shows, with_orientation

from cdml_edge.decode import decode_image
from cdml_edge.decode.orientation import exif_orientation, orient


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("code", range(1, 9))
def test_the_tag_is_read(code: int, order: str) -> None:
    assert exif_orientation(with_orientation(jpeg(), code, order)) == code


@pytest.mark.parametrize("backend", ["simplejpeg", "opencv"])
@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("code", [3, 6, 8])
def test_an_orientation_stored_as_a_long_turns_as_a_short_one(
    code: int, order: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some writers store the tag as a LONG; it was ignored (OpenCV turned the II ones).

    OpenCV reads the tag's first two bytes whatever its type, so it turns a little-endian
    LONG and not a big-endian one; the value the tag holds is what counts here.
    """
    if backend == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    data = with_orientation(jpeg(), code, order, long=True)
    assert exif_orientation(data) == code
    want = opencv_shows(with_orientation(jpeg(), code, order))
    assert mean_diff(decode_image(data), want) < 1.0


def test_no_tag_or_a_broken_one_is_upright() -> None:
    plain = jpeg()
    assert exif_orientation(plain) == 1
    broken = with_orientation(plain, 6)
    cut = broken[:30] + b"\0" * 8 + broken[38:]  # the TIFF header zeroed
    assert exif_orientation(cut) == 1
    assert exif_orientation(b"\xff\xd8\xff\xe1\xff\xff") == 1  # a length past the end


@pytest.mark.parametrize("backend", ["simplejpeg", "opencv"])
@pytest.mark.parametrize("code", range(1, 9))
def test_every_backend_shows_what_opencv_shows(
    code: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    data = with_orientation(jpeg(), code)
    want = opencv_shows(data)
    assert mean_diff(decode_image(data), want) < 1.0
    # the reduced path: a target a third of the size, both ways round
    th, tw = want.shape[0] // 3, want.shape[1] // 3
    small = cv2.resize(want, (tw, th), interpolation=cv2.INTER_AREA)
    assert mean_diff(decode_image(data, target_size=(tw, th)), small) < 3.0
    if code != 1:  # the tag matters: the stored pixels are not what is shown
        raw = decode_image(data, orientation="raw")
        assert raw.shape != want.shape or mean_diff(raw, want) > 20


def test_raw_keeps_the_stored_pixels_on_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    data = with_orientation(jpeg(), 6)
    stored = decode_image(jpeg())
    assert mean_diff(decode_image(data, orientation="raw"), stored) < 1.0
    monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    assert mean_diff(decode_image(data, orientation="raw"), stored) < 1.0


@pytest.mark.parametrize("code", range(1, 9))
def test_orient_matches_the_exif_definition(code: int) -> None:
    """Where the stored top-left pixel goes, per the EXIF specification's table."""
    img = np.zeros((2, 3, 1), np.uint8)
    img[0, 0] = 1
    out = orient(img, code)
    corner = {
        1: (0, 0),
        2: (0, -1),
        3: (-1, -1),
        4: (-1, 0),
        5: (0, 0),
        6: (0, -1),
        7: (-1, -1),
        8: (-1, 0),
    }
    assert out.shape[:2] == ((3, 2) if code >= 5 else (2, 3))
    assert out[corner[code]][0] == 1
